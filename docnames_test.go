package ratesem_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestDocsNameOnlyWhatExists resolves every identifier that the doc
// comments of the module's non-test Go files, README.md and
// benchmarks/README.md name, so that no doc sends a reader to a function,
// type, method, field or constant that does not exist (on 3c9e6ad, Rule.Learn's doc named LearnXRateLimit
// and LearnIETF). It checks:
//
//   - pkg.Name, pkg.Type.Member and *pkg.Type, where pkg is the name of a
//     package of this module or of a package it imports (std included):
//     Name must be declared at the top level of a package of that name,
//     and Member must be a method, field or interface method of Type;
//   - Type.Member, where Type is a type of the commented package, of this
//     module, or of a package it imports;
//   - a bare CamelCase name such as ErrDeadline or WithObserver (in the
//     README, only inside backticks), which must be declared somewhere in
//     the module or its imports, or be one of the proper nouns listed in
//     prose.
//
// Names after an unknown qualifier (a local variable: resp.Body) and
// lower-case names are not checked.
func TestDocsNameOnlyWhatExists(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no go command on PATH [CI is set: not skipping]")
		}
		t.Skip("no go command on PATH")
	}
	idx := newDocIndex()
	fset := token.NewFileSet()
	// The packages imported, by the directory of the module importing them.
	imports := map[string]map[string]bool{".": {"golang.org/x/sync/semaphore": true, "golang.org/x/sync/errgroup": true}}
	var docs []docText
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := "github.com/ratesem/ratesem"
		if d := filepath.ToSlash(filepath.Dir(p)); d != "." {
			dir += "/" + d
		}
		mod := nested(p)
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			if !strings.HasPrefix(ip, "github.com/ratesem/ratesem") {
				if imports[mod] == nil {
					imports[mod] = map[string]bool{}
				}
				imports[mod][ip] = true
			}
			if im.Name != nil && im.Name.Name != "_" && im.Name.Name != "." {
				idx.alias(im.Name.Name, ip)
			}
		}
		if mod != "." || strings.HasSuffix(p, "_test.go") {
			idx.addNames(dir, f) // a name a doc may cite (a test, a benchmark), not a package's API
			return nil
		}
		if !strings.Contains(dir, "/internal/") {
			idx.alias(f.Name.Name, dir)
		}
		idx.addFile(dir, f)
		for _, cg := range docComments(f) {
			docs = append(docs, docText{where: fset.Position(cg.Pos()).String(), pkg: dir, text: cg.Text()})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The imported packages' declarations, from their sources, each module's
	// imports listed in that module.
	var out []byte
	incomplete := map[string]bool{} // modules whose imports are not all in the module cache
	for mod, ips := range imports {
		var paths []string
		for p := range ips {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		cmd := exec.Command(goBin, append([]string{"list", "-e", "-f", "{{.ImportPath}}\t{{.Dir}}"}, paths...)...)
		cmd.Dir = mod
		o, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", mod, err)
		}
		for _, l := range strings.Split(string(o), "\n") {
			if l != "" && strings.HasSuffix(l, "\t") {
				incomplete[mod] = true
			}
		}
		out = append(out, o...)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		ip, dir, ok := strings.Cut(sc.Text(), "\t")
		if !ok || dir == "" {
			continue
		}
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", ip, err)
		}
		for name, pkg := range pkgs {
			if name == "main" || strings.HasSuffix(name, "_test") {
				continue
			}
			idx.alias(name, ip)
			for _, f := range pkg.Files {
				idx.addFile(ip, f)
			}
		}
	}

	var bad []string
	for _, d := range docs {
		bad = append(bad, idx.check(d, false)...)
	}
	for _, name := range []string{"README.md", "benchmarks/README.md"} {
		if mod := nested(name); incomplete[mod] {
			t.Logf("%s not checked: the imports of module %s are not downloaded (cd %s && go mod download)", name, mod, mod)
			continue
		}
		readme, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range readmeSpans(name, string(readme)) {
			bad = append(bad, idx.check(line, true)...)
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// nested returns the directory of the module the file at p belongs to:
// "." for this one, else a nested module's (benchmarks, examples/otel),
// whose names a doc may cite but whose own docs are not checked here.
func nested(p string) string {
	for d := filepath.Dir(p); d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return "."
}

// docText is one doc comment (or README span) and where it is.
type docText struct {
	where, pkg, text string
	code             bool // a README code block: qualified names only
}

// docComments returns the doc comments of f: the package's, and those of
// its declarations, specs, fields and interface methods.
func docComments(f *ast.File) []*ast.CommentGroup {
	var cgs []*ast.CommentGroup
	add := func(cg *ast.CommentGroup) {
		if cg != nil {
			cgs = append(cgs, cg)
		}
	}
	add(f.Doc)
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			add(n.Doc)
			return false // not the comments inside a body
		case *ast.GenDecl:
			add(n.Doc)
		case *ast.TypeSpec:
			add(n.Doc)
		case *ast.ValueSpec:
			add(n.Doc)
		case *ast.Field:
			add(n.Doc)
		}
		return true
	})
	return cgs
}

// readmeSpans returns the README's inline code spans (one docText per
// line's spans) and its fenced code blocks.
func readmeSpans(name, s string) []docText {
	var out []docText
	inline := regexp.MustCompile("`([^`\n]+)`")
	fence := false
	var block []string
	for i, line := range strings.Split(s, "\n") {
		where := name + ":" + strconv.Itoa(i+1)
		if strings.HasPrefix(line, "```") {
			if fence {
				out = append(out, docText{where: where, text: strings.Join(block, "\n"), code: true})
				block = nil
			}
			fence = !fence
			continue
		}
		if fence {
			block = append(block, line)
			continue
		}
		for _, m := range inline.FindAllStringSubmatch(line, -1) {
			out = append(out, docText{where: where, text: m[1]})
		}
	}
	return out
}

// member is what a type has: methods, fields (and interface methods), and
// the types it embeds (whose members it has too).
type members struct {
	names  map[string]bool
	embeds []string // embedded type names, possibly "pkg.T"
}

// docIndex holds the declarations of every package read.
type docIndex struct {
	byName map[string][]string            // package name or alias → import paths
	top    map[string]map[string]bool     // import path → top-level names
	types  map[string]map[string]*members // import path → type name → members
	all    map[string]bool                // every name declared anywhere, members included
}

func newDocIndex() *docIndex {
	return &docIndex{byName: map[string][]string{}, top: map[string]map[string]bool{},
		types: map[string]map[string]*members{}, all: map[string]bool{}}
}

func (x *docIndex) alias(name, ip string) {
	for _, p := range x.byName[name] {
		if p == ip {
			return
		}
	}
	x.byName[name] = append(x.byName[name], ip)
}

func (x *docIndex) typ(ip, name string) *members {
	if x.types[ip] == nil {
		x.types[ip] = map[string]*members{}
	}
	m := x.types[ip][name]
	if m == nil {
		m = &members{names: map[string]bool{}}
		x.types[ip][name] = m
	}
	return m
}

// addNames records the names f, a file in the package directory ip,
// declares at the top level, and its methods, as names a doc may cite bare;
// its tests, benchmarks, examples and fuzz targets also as ip's, so a doc
// may cite semaphore.TestX.
func (x *docIndex) addNames(ip string, f *ast.File) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			x.all[d.Name.Name] = true
			for _, pre := range []string{"Test", "Benchmark", "Example", "Fuzz"} {
				if d.Recv == nil && strings.HasPrefix(d.Name.Name, pre) {
					if x.top[ip] == nil {
						x.top[ip] = map[string]bool{}
					}
					x.top[ip][d.Name.Name] = true
				}
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					x.all[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						x.all[n.Name] = true
					}
				}
			}
		}
	}
}

// addFile records the declarations of f, a file of the package at ip (its
// name is recorded by the caller: internal packages are not qualifiers).
func (x *docIndex) addFile(ip string, f *ast.File) {
	if x.top[ip] == nil {
		x.top[ip] = map[string]bool{}
	}
	top := x.top[ip]
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			x.all[d.Name.Name] = true
			if d.Recv == nil || len(d.Recv.List) == 0 {
				top[d.Name.Name] = true
				continue
			}
			if r := recvName(d.Recv.List[0].Type); r != "" {
				x.typ(ip, r).names[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					top[s.Name.Name] = true
					x.all[s.Name.Name] = true
					m := x.typ(ip, s.Name.Name)
					var fields *ast.FieldList
					switch tt := s.Type.(type) {
					case *ast.StructType:
						fields = tt.Fields
					case *ast.InterfaceType:
						fields = tt.Methods
					case *ast.Ident:
						m.embeds = append(m.embeds, tt.Name) // type T U: not U's methods, but its fields
					case *ast.SelectorExpr:
						m.embeds = append(m.embeds, typeName(tt)) // type T = pkg.U: not followed
					}
					if fields == nil {
						continue
					}
					for _, fld := range fields.List {
						if len(fld.Names) == 0 {
							if e := typeName(fld.Type); e != "" {
								m.embeds = append(m.embeds, e)
								m.names[e[strings.LastIndex(e, ".")+1:]] = true
							}
							continue
						}
						for _, n := range fld.Names {
							m.names[n.Name] = true
							x.all[n.Name] = true
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						top[n.Name] = true
						x.all[n.Name] = true
					}
				}
			}
		}
	}
}

// recvName returns the type name of a method receiver.
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

// typeName returns "T" or "pkg.T" for an embedded field's type.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		if p, ok := t.X.(*ast.Ident); ok {
			return p.Name + "." + t.Sel.Name
		}
	}
	return ""
}

// hasMember reports whether type name of package ip has member m, through
// its embedded types; unknown (an embedded type of another package) counts
// as yes.
func (x *docIndex) hasMember(ip, name, m string, depth int) bool {
	t := x.types[ip][name]
	if t == nil || depth > 5 {
		return false
	}
	if t.names[m] {
		return true
	}
	for _, e := range t.embeds {
		if strings.Contains(e, ".") {
			return true // promoted from another package: not followed
		}
		if x.hasMember(ip, e, m, depth+1) {
			return true
		}
	}
	return false
}

var (
	// qualified: A.B or A.B.C, not part of a path, URL, host or file name.
	qualifiedRe = regexp.MustCompile(`(^|[^\w./:@#-])(\*?)([A-Za-z_]\w*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
	// bare: a CamelCase identifier with a hump (ErrDeadline, WithObserver).
	bareRe = regexp.MustCompile(`(^|[^\w./:@#*-])([A-Z][a-z0-9]+[A-Z]\w*)\b`)
)

// proseWords are CamelCase words the docs use as names of things outside
// Go: companies, products, headers, algorithms.
var proseWords = map[string]bool{
	"OpenAI": true, "GitHub": true, "GraphQL": true, "RateLimit": true, "OpenTelemetry": true, "SaaS": true,
	"KiB": true, "MiB": true, // units
	"LimitRequestFieldSize": true,               // Apache's directive
	"LimitX":                true, "PerX": true, // binance's "LimitX is the N of rule X"
	"WriteArgs": true, // go-redis's internal protocol writer, in a profile
}

// check returns a line per name d names that does not resolve.
func (x *docIndex) check(d docText, readme bool) []string {
	var bad []string
	text := d.text
	if readme && !d.code {
		text = strings.TrimSpace(text)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "://") {
			line = regexp.MustCompile(`\S+://\S+`).ReplaceAllString(line, " ")
		}
		for _, m := range qualifiedRe.FindAllStringSubmatch(line, -1) {
			a, b, c := m[3], m[4], m[5]
			if why := x.resolve(d.pkg, a, b, c); why != "" {
				bad = append(bad, d.where+": "+strings.TrimPrefix(m[0], m[1])+": "+why)
			}
		}
		if d.code {
			continue
		}
		for _, m := range bareRe.FindAllStringSubmatchIndex(line, -1) {
			w := line[m[4]:m[5]]
			if m[5] < len(line) && line[m[5]] == '.' {
				continue // the qualifier of a qualified name, checked above
			}
			if x.all[w] || x.all["Benchmark"+w] || proseWords[w] { // a benchmark by its -bench name
				continue
			}
			bad = append(bad, d.where+": "+w+": declared nowhere in the module or its imports")
		}
	}
	return bad
}

// resolve checks a.b (c empty) or a.b.c as a name in the doc of package
// pkg; it returns why it does not resolve, or "" when it does or cannot be
// checked (a is not a package or type name).
func (x *docIndex) resolve(pkg, a, b, c string) string {
	if ips := x.byName[a]; len(ips) > 0 {
		for _, ip := range ips {
			if !x.top[ip][b] {
				continue
			}
			if c == "" || x.types[ip][b] == nil || x.hasMember(ip, b, c, 0) {
				return ""
			}
		}
		if c == "" && strings.HasSuffix(b, "s") && x.resolve(pkg, a, strings.TrimSuffix(b, "s"), "") == "" {
			return "" // a plural: "ratesem.Events"
		}
		if c != "" {
			return "no package named " + a + " declares " + b + " with a member " + c
		}
		return "no package named " + a + " declares " + b
	}
	if c != "" {
		return "" // a.b.c with a not a package: a local name
	}
	// a.b with a a type: the commented package's first, then any.
	if x.types[pkg][a] != nil {
		if x.hasMember(pkg, a, b, 0) {
			return ""
		}
		return "type " + path.Base(pkg) + "." + a + " has no member " + b
	}
	if !ast.IsExported(a) {
		return "" // a local variable (p.Limit, resp.Body)
	}
	found := false
	for ip, ts := range x.types {
		if ts[a] == nil || !x.top[ip][a] {
			continue
		}
		found = true
		if x.hasMember(ip, a, b, 0) {
			return ""
		}
	}
	if found {
		return "no type named " + a + " has a member " + b
	}
	return ""
}
