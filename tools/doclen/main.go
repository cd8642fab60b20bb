// Command doclen prints, per package, the doc comments of exported
// identifiers by length: the longest ones, how many exceed a limit, and the
// total of doc lines. It keeps "an identifier's doc is its contract in a
// few lines" measurable.
//
// Usage, from the tools directory:
//
//	go run ./doclen [-top N] [-max L] dir ...
//
// Only non-test .go files count; a method counts when its receiver type is
// exported. Package docs are left out (they have their own limit).
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
)

type doc struct {
	name  string
	pos   string
	lines int
}

func main() {
	top := flag.Int("top", 5, "longest docs to print per package")
	max := flag.Int("max", 10, "a doc longer than this many lines is counted as over")
	flag.Parse()
	for _, dir := range flag.Args() {
		docs, err := collect(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sort.SliceStable(docs, func(i, j int) bool { return docs[i].lines > docs[j].lines })
		total, over := 0, 0
		for _, d := range docs {
			total += d.lines
			if d.lines > *max {
				over++
			}
		}
		longest := 0
		if len(docs) > 0 {
			longest = docs[0].lines
		}
		fmt.Printf("%s: %d exported docs, %d lines, longest %d, over %d: %d\n", dir, len(docs), total, longest, *max, over)
		for i := 0; i < *top && i < len(docs); i++ {
			fmt.Printf("  %4d  %s  (%s)\n", docs[i].lines, docs[i].name, docs[i].pos)
		}
	}
}

func collect(dir string) ([]doc, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var docs []doc
	add := func(name string, cg *ast.CommentGroup, at token.Pos) {
		if cg == nil {
			return
		}
		p := fset.Position(at)
		n := fset.Position(cg.End()).Line - fset.Position(cg.Pos()).Line + 1
		docs = append(docs, doc{name, fmt.Sprintf("%s:%d", p.Filename, p.Line), n})
	}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					name := d.Name.Name
					if d.Recv != nil {
						recv := recvName(d.Recv.List[0].Type)
						if !ast.IsExported(recv) {
							continue
						}
						name = recv + "." + name
					}
					add(name, d.Doc, d.Pos())
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							cg := s.Doc
							if cg == nil && len(d.Specs) == 1 {
								cg = d.Doc
							}
							add(s.Name.Name, cg, s.Pos())
							addFields(add, s)
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if !n.IsExported() {
									continue
								}
								cg := s.Doc
								if cg == nil && len(d.Specs) == 1 {
									cg = d.Doc
								}
								add(n.Name, cg, n.Pos())
								break
							}
						}
					}
				}
			}
		}
	}
	return docs, nil
}

// addFields counts the docs of exported struct fields and interface methods.
func addFields(add func(string, *ast.CommentGroup, token.Pos), s *ast.TypeSpec) {
	var list *ast.FieldList
	switch t := s.Type.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	}
	if list == nil {
		return
	}
	for _, f := range list.List {
		for _, n := range f.Names {
			if n.IsExported() {
				add(s.Name.Name+"."+n.Name, f.Doc, n.Pos())
				break
			}
		}
	}
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}
