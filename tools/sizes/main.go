// Command sizes prints the figures the project keeps its rooms to: the
// largest production files, the longest functions with their cyclomatic
// complexity, and the exported identifiers of each library package.
//
// Usage, from the repository's root:
//
//	go run ./tools/sizes [-top N] [dir ...]
//
// Test files, testdata and internal/sim's simulator are production code's
// neighbours, not production: only non-test .go files count. Cyclomatic
// complexity is 1 + one per if, for, range, case, comm clause, && and ||
// (gocyclo's rule).
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type fileSize struct {
	path  string
	lines int
}

type funcSize struct {
	name        string
	lines, cplx int
}

func main() {
	top := flag.Int("top", 10, "rows per table")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"leader", "worker", "cmd"}
	}
	var files []fileSize
	var funcs []funcSize
	exported := map[string]int{}
	fset := token.NewFileSet()
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && (e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".")) {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			files = append(files, fileSize{path, fset.File(f.Pos()).LineCount()})
			pkg := filepath.Dir(path)
			for _, decl := range f.Decls {
				countExported(decl, pkg, exported)
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				funcs = append(funcs, funcSize{path + ":" + funcName(fd), n, complexity(fd)})
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "sizes:", err)
			os.Exit(1)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].lines > files[j].lines })
	sort.Slice(funcs, func(i, j int) bool { return funcs[i].lines > funcs[j].lines })
	fmt.Println("| file | lines |\n| --- | ---: |")
	for _, f := range files[:min(*top, len(files))] {
		fmt.Printf("| %s | %d |\n", f.path, f.lines)
	}
	fmt.Println("\n| function | lines | cyclomatic |\n| --- | ---: | ---: |")
	for _, f := range funcs[:min(*top, len(funcs))] {
		fmt.Printf("| %s | %d | %d |\n", f.name, f.lines, f.cplx)
	}
	maxC := funcs[0]
	for _, f := range funcs {
		if f.cplx > maxC.cplx {
			maxC = f
		}
	}
	fmt.Printf("\nmost complex: %s (%d lines, cyclomatic %d)\n", maxC.name, maxC.lines, maxC.cplx)
	pkgs := make([]string, 0, len(exported))
	total := 0
	for p, n := range exported {
		pkgs = append(pkgs, p)
		total += n
	}
	sort.Strings(pkgs)
	fmt.Println("\n| package | exported identifiers |\n| --- | ---: |")
	for _, p := range pkgs {
		fmt.Printf("| %s | %d |\n", p, exported[p])
	}
	fmt.Printf("| all | %d |\n", total)
}

// funcName is Recv.Name for a method, Name for a function.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// complexity is gocyclo's count for fd.
func complexity(fd *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// countExported adds decl's exported identifiers (functions, methods of
// exported types, types, constants, variables, and exported fields and
// interface methods) to the package's count.
func countExported(decl ast.Decl, pkg string, m map[string]int) {
	if strings.Contains(pkg, "internal") || strings.Contains(pkg, "cmd") {
		return
	}
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d)) {
			m[pkg]++
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				m[pkg]++
				m[pkg] += exportedMembers(s.Type)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						m[pkg]++
					}
				}
			}
		}
	}
}

func exportedRecv(fd *ast.FuncDecl) bool {
	name := funcName(fd)
	return ast.IsExported(name[:strings.IndexByte(name+".", '.')])
}

func exportedMembers(t ast.Expr) int {
	var list *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return 0
	}
	n := 0
	for _, f := range list.List {
		for _, name := range f.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}
