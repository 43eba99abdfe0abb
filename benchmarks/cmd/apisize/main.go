// Command apisize counts a package tree's public surface and code size with
// go/ast, the measure issue 19 asks for: for each package directory given
// (relative to -root), the exported top-level names (types, funcs, vars,
// consts), exported methods and exported interface methods (struct fields
// not counted), and the non-blank, non-comment lines of its non-test files
// (inside a raw string, a line that is blank or a Lua comment, "--", is not
// code either).
//
//	go run ./cmd/apisize -root .. . window semaphore clientpool httpclient redisrate
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", ".", "module root the package directories are relative to")
	recurse := flag.Bool("r", false, "also count every package below each directory given")
	flag.Parse()
	var dirs []string
	for _, d := range flag.Args() {
		dirs = append(dirs, d)
		if *recurse {
			filepath.WalkDir(filepath.Join(*root, d), func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() && p != filepath.Join(*root, d) {
					rel, _ := filepath.Rel(*root, p)
					dirs = append(dirs, rel)
				}
				return nil
			})
		}
	}
	sort.Strings(dirs)
	var tn, tl int
	for _, d := range dirs {
		n, l, err := count(filepath.Join(*root, d))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if n == 0 && l == 0 {
			continue
		}
		fmt.Printf("%-28s exported %4d  lines %6d\n", d, n, l)
		tn += n
		tl += l
	}
	fmt.Printf("%-28s exported %4d  lines %6d\n", "total", tn, tl)
}

func count(dir string) (exported, lines int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	fset := token.NewFileSet()
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, name)
		src, err := os.ReadFile(path)
		if err != nil {
			return 0, 0, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return 0, 0, err
		}
		if f.Name.Name == "main" {
			continue
		}
		exported += exportedNames(f)
		lines += codeLines(fset, f, src)
	}
	return exported, lines, nil
}

func exportedNames(f *ast.File) int {
	n := 0
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || recvExported(d.Recv.List[0].Type) {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					n++
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, id := range m.Names {
								if id.IsExported() {
									n++
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

func recvExported(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// codeLines counts the lines that hold a token other than a comment; a raw
// string spanning lines (a Lua script) counts every line it spans.
func codeLines(fset *token.FileSet, f *ast.File, src []byte) int {
	var s scanner.Scanner
	file := fset.AddFile("", -1, len(src))
	s.Init(file, src, nil, 0)
	code := map[int]bool{}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.COMMENT || (tok == token.SEMICOLON && lit == "\n") {
			continue
		}
		first := file.Line(pos)
		if tok == token.STRING && strings.HasPrefix(lit, "`") {
			// A raw string (the Lua scripts of internal/rstore): its blank
			// lines and Lua comment lines are not code, as in Go.
			for i, l := range strings.Split(lit, "\n") {
				if l = strings.TrimSpace(l); i == 0 || (l != "" && !strings.HasPrefix(l, "--")) {
					code[first+i] = true
				}
			}
			continue
		}
		last := first + strings.Count(lit, "\n")
		for l := first; l <= last; l++ {
			code[l] = true
		}
	}
	return len(code)
}
