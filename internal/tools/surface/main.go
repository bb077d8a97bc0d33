// Command surface measures the size and API surface of the quorumlock
// library, so that issue 12 (keeping the library small) is tracked with
// numbers rather than impressions.
//
// The library is the non-test .go files of clock, quorum, redlock, mutex and
// every package under internal/ except the test helpers and tools
// (internal/bench, a separate module, internal/redistest, internal/netfault,
// internal/safety, internal/tools); examples/ is not measured. Per package
// and in total it reports physical lines and the largest file; exported
// identifiers (top-level funcs, types, vars, consts and exported methods of
// exported types, with internal/... totalled separately); mean doc comment
// lines per exported identifier; the constant first arguments of errors.New
// and fmt.Errorf (count, mean and max length); and functions taking a bool
// parameter. It then lists the offenders: files over -maxfile lines, doc
// comments over -maxdoc lines, error strings over -maxerr characters and
// every bool parameter; -v also lists every file, identifier and error string.
//
// Usage, from the repository root: go run ./internal/tools/surface [-v]
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
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// publicRoots are the top-level library packages; internal/ is walked too.
var publicRoots = []string{"clock", "quorum", "redlock", "mutex", "idempotency"}

// excluded are the internal/ directories that are not library code.
var excluded = map[string]bool{
	"internal/bench": true, "internal/redistest": true, "internal/netfault": true,
	"internal/safety": true, "internal/tools": true,
}

// An item is one measured thing: a file (n = lines), an exported identifier
// (n = doc lines), an error string (n = length) or a function with bool
// parameters. where is "file" or "file:line".
type item struct {
	where, name string
	n           int
}

type pkgStats struct {
	dir                          string
	internal                     bool
	files, exported, errs, bools []item
}

func main() {
	root := flag.String("root", ".", "repository root")
	verbose := flag.Bool("v", false, "also list every file, exported identifier and error string")
	maxFile := flag.Int("maxfile", 400, "report files with more lines than this")
	maxDoc := flag.Int("maxdoc", 12, "report doc comments with more lines than this")
	maxErr := flag.Int("maxerr", 120, "report error strings longer than this")
	flag.Parse()

	dirs, err := libraryDirs(*root)
	check(err)
	fset := token.NewFileSet()
	pub, in, all := &pkgStats{dir: "TOTAL public"}, &pkgStats{dir: "TOTAL internal"}, &pkgStats{dir: "TOTAL"}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "package\tfiles\tlines\tlargest file\tlines\texported\tdoc/sym\terrs\terr mean\terr max\tbool fns\t")
	for _, dir := range dirs {
		p, err := measure(fset, *root, dir)
		check(err)
		if len(p.files) == 0 {
			continue
		}
		row(w, p)
		t := pub
		if p.internal {
			t = in
		}
		for _, t := range []*pkgStats{t, all} {
			t.files = append(t.files, p.files...)
			t.exported = append(t.exported, p.exported...)
			t.errs = append(t.errs, p.errs...)
			t.bools = append(t.bools, p.bools...)
		}
	}
	fmt.Fprintln(w, "\t\t\t\t\t\t\t\t\t\t\t")
	row(w, pub)
	row(w, in)
	row(w, all)
	w.Flush()

	list(fmt.Sprintf("Files over %d lines (file lines):", *maxFile), "%[1]s %[3]d", all.files, *maxFile)
	list(fmt.Sprintf("Exported identifiers with doc comments over %d lines (file:line name lines):", *maxDoc),
		"%[1]s %[2]s %[3]d", all.exported, *maxDoc)
	list(fmt.Sprintf("Error strings over %d characters (file:line length):", *maxErr),
		"%[1]s %[3]d", all.errs, *maxErr)
	list(fmt.Sprintf("Functions with bool parameters (%d) (file:line name):", len(all.bools)),
		"%[1]s %[2]s", all.bools, 0)
	if *verbose {
		list("All files (file lines):", "%[1]s %[3]d", all.files, -1)
		list("All exported identifiers (file:line name doc-lines):", "%[1]s %[2]s %[3]d", all.exported, -1)
		list("All error strings (file:line length text):", "%[1]s %[3]d %[2]s", all.errs, -1)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(1)
	}
}

func sum(items []item) (total, biggest int, big item) {
	for _, it := range items {
		total += it.n
		if it.n > big.n {
			big = it
		}
	}
	return total, big.n, big
}

func row(w *tabwriter.Writer, p *pkgStats) {
	lines, _, big := sum(p.files)
	docs, _, _ := sum(p.exported)
	errLen, errMax, _ := sum(p.errs)
	fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t\n",
		p.dir, len(p.files), lines, filepath.Base(big.where), big.n,
		len(p.exported), mean(docs, len(p.exported)),
		len(p.errs), mean(errLen, len(p.errs)), errMax, len(p.bools))
}

func mean(sum, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(sum)/float64(n), 'f', 1, 64)
}

// list prints header and the items with n > limit, or "none". format
// refers to an item's where, name and n as %[1]s, %[2]s and %[3]d.
func list(header, format string, items []item, limit int) {
	fmt.Println("\n" + header)
	count := 0
	for _, it := range items {
		if it.n > limit {
			count++
			fmt.Println("  " + fmt.Sprintf(format, it.where, it.name, it.n))
		}
	}
	if count == 0 {
		fmt.Println("  none")
	}
}

// libraryDirs returns the slash-separated, root-relative directories that
// hold library packages, in sorted order.
func libraryDirs(root string) ([]string, error) {
	var dirs []string
	for _, top := range append(append([]string(nil), publicRoots...), "internal") {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path) // path is under root
			rel = filepath.ToSlash(rel)
			base := d.Name()
			if excluded[rel] || base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != top {
				return filepath.SkipDir // a nested module
			}
			dirs = append(dirs, rel)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(dirs)
	return dirs, nil
}

func measure(fset *token.FileSet, root, dir string) (*pkgStats, error) {
	p := &pkgStats{dir: dir, internal: dir == "internal" || strings.HasPrefix(dir, "internal/")}
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		rel := dir + "/" + name
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		// Physical lines, as wc -l counts them (plus an unterminated last line).
		p.files = append(p.files, item{where: rel, n: fset.File(f.FileStart).LineCount()})
		files = append(files, f)
	}
	consts := stringConsts(files)
	for _, f := range files {
		p.exported = append(p.exported, exportedSymbols(fset, f)...)
		p.errs = append(p.errs, errorStrings(fset, f, consts)...)
		p.bools = append(p.bools, boolParams(fset, f)...)
	}
	return p, nil
}

// at returns "file:line" for pos.
func at(fset *token.FileSet, pos token.Pos) string {
	p := fset.Position(pos)
	return p.Filename + ":" + strconv.Itoa(p.Line)
}

func docLines(fset *token.FileSet, cg *ast.CommentGroup) int {
	if cg == nil {
		return 0
	}
	return fset.Position(cg.End()).Line - fset.Position(cg.Pos()).Line + 1
}

// recvType returns the base type name of a method receiver.
func recvType(fd *ast.FuncDecl) string {
	for t := fd.Recv.List[0].Type; ; {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil {
		return fd.Name.Name
	}
	return recvType(fd) + "." + fd.Name.Name
}

// exportedSymbols returns the exported top-level identifiers of f. A spec
// in a parenthesized group uses its own doc comment; an ungrouped
// declaration uses the declaration's.
func exportedSymbols(fset *token.FileSet, f *ast.File) []item {
	var out []item
	add := func(id *ast.Ident, name string, doc *ast.CommentGroup) {
		out = append(out, item{at(fset, id.Pos()), name, docLines(fset, doc)})
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Recv != nil && !ast.IsExported(recvType(d)) {
				continue
			}
			add(d.Name, funcName(d), d.Doc)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				var doc *ast.CommentGroup
				var ids []*ast.Ident
				switch s := spec.(type) {
				case *ast.TypeSpec:
					doc, ids = s.Doc, []*ast.Ident{s.Name}
				case *ast.ValueSpec:
					doc, ids = s.Doc, s.Names
				}
				if doc == nil && !d.Lparen.IsValid() {
					doc = d.Doc
				}
				for _, id := range ids {
					if id.IsExported() {
						add(id, id.Name, doc)
					}
				}
			}
		}
	}
	return out
}

// stringConsts maps package-level constant names to their string values,
// where those can be folded from literals.
func stringConsts(files []*ast.File) map[string]string {
	m := map[string]string{}
	for range 3 { // repeat so that constants may refer to later ones
		for _, f := range files {
			for _, decl := range f.Decls {
				if d, ok := decl.(*ast.GenDecl); ok && d.Tok == token.CONST {
					for _, spec := range d.Specs {
						s := spec.(*ast.ValueSpec)
						for i := range min(len(s.Names), len(s.Values)) {
							if v, ok := fold(s.Values[i], m); ok {
								m[s.Names[i].Name] = v
							}
						}
					}
				}
			}
		}
	}
	return m
}

// fold evaluates a string constant expression built from literals, known
// constants, parentheses and +.
func fold(e ast.Expr, consts map[string]string) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[x.Name]
		return s, ok
	case *ast.ParenExpr:
		return fold(x.X, consts)
	case *ast.BinaryExpr:
		a, ok1 := fold(x.X, consts)
		b, ok2 := fold(x.Y, consts)
		return a + b, ok1 && ok2 && x.Op == token.ADD
	}
	return "", false
}

// errorStrings finds the constant first arguments of errors.New and
// fmt.Errorf calls in f.
func errorStrings(fset *token.FileSet, f *ast.File, consts map[string]string) []item {
	names := map[string]string{} // local import name -> path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	var out []item
	ast.Inspect(f, func(n ast.Node) bool {
		call, _ := n.(*ast.CallExpr)
		if call == nil || len(call.Args) == 0 {
			return true
		}
		fn := ""
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok {
				fn = names[pkg.Name] + "." + sel.Sel.Name
			}
		}
		if s, ok := fold(call.Args[0], consts); ok && (fn == "errors.New" || fn == "fmt.Errorf") {
			out = append(out, item{at(fset, call.Args[0].Pos()), strconv.Quote(s), utf8.RuneCountInString(s)})
		}
		return true
	})
	return out
}

// boolParams lists the functions and methods in f with a bool parameter.
func boolParams(fset *token.FileSet, f *ast.File) []item {
	var out []item
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		var params []string
		for _, field := range fd.Type.Params.List {
			if id, ok := field.Type.(*ast.Ident); !ok || id.Name != "bool" {
				continue
			}
			for _, n := range append(field.Names, ast.NewIdent("_"))[:max(1, len(field.Names))] {
				params = append(params, n.Name+" bool")
			}
		}
		if len(params) > 0 {
			out = append(out, item{at(fset, fd.Name.Pos()), funcName(fd) + " (" + strings.Join(params, ", ") + ")", 1})
		}
	}
	return out
}
