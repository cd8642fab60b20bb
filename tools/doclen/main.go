// Command doclen prints, per package, the doc comments of exported
// identifiers by length: the longest ones, how many exceed a limit, and the
// total of doc lines. It keeps "an identifier's doc is its contract in a
// few lines" measurable.
//
// Usage, from the tools directory:
//
//	go run ./doclen [-top N] [-max L] dir ...
//
// It reads the docs as go doc does (go/doc, non-test files): functions,
// types, methods of exported types, constants and variables (a group's
// doc once), and the docs of exported struct fields and interface
// methods. The package doc is left out: it has a limit of its own.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type entry struct {
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
		total, over, longest := 0, 0, 0
		for _, d := range docs {
			total += d.lines
			longest = max0(longest, d.lines)
			if d.lines > *max {
				over++
			}
		}
		fmt.Printf("%s: %d exported docs, %d lines, longest %d, over %d: %d\n", dir, len(docs), total, longest, *max, over)
		for i := 0; i < *top && i < len(docs); i++ {
			fmt.Printf("  %4d  %s  (%s)\n", docs[i].lines, docs[i].name, docs[i].pos)
		}
	}
}

func max0(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// collect returns the docs of dir's exported identifiers.
func collect(dir string) ([]entry, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no Go files", dir)
	}
	pkg, err := doc.NewFromFiles(fset, files, "example.com/"+filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	var out []entry
	add := func(name, text string, at token.Pos) {
		if text != "" {
			out = append(out, entry{name, fset.Position(at).String(), strings.Count(text, "\n")})
		}
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			add(v.Names[0], v.Doc, v.Decl.Pos())
		}
	}
	values(pkg.Consts)
	values(pkg.Vars)
	for _, f := range pkg.Funcs {
		add(f.Name, f.Doc, f.Decl.Pos())
	}
	for _, t := range pkg.Types {
		add(t.Name, t.Doc, t.Decl.Pos())
		values(t.Consts)
		values(t.Vars)
		for _, f := range t.Funcs {
			add(f.Name, f.Doc, f.Decl.Pos())
		}
		for _, m := range t.Methods {
			add(t.Name+"."+m.Name, m.Doc, m.Decl.Pos())
		}
		for _, spec := range t.Decl.Specs {
			if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == t.Name {
				members(t.Name, ts.Type, add)
			}
		}
	}
	return out, nil
}

// members adds the docs of a type's exported struct fields and interface
// methods.
func members(typ string, e ast.Expr, add func(string, string, token.Pos)) {
	ast.Inspect(e, func(n ast.Node) bool {
		if f, ok := n.(*ast.Field); ok && f.Doc != nil && len(f.Names) > 0 && f.Names[0].IsExported() {
			add(typ+"."+f.Names[0].Name, f.Doc.Text(), f.Pos())
		}
		return true
	})
}
