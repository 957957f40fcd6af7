package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// walkHeading opens the table of docs/architecture.md that names, for each step of one
// reconcile, the file and the functions that do it.
const walkHeading = "### Where each step lives"

// TestArchitectureWalkNamesFunctionsThatExist: every file the architecture walk names exists
// and declares every function it names there (a method as Type.Method), so the walk a
// newcomer follows cannot drift from the code.
func TestArchitectureWalkNamesFunctionsThatExist(t *testing.T) {
	rows := walkRows(t, filepath.Join("..", "docs", "architecture.md"))
	if len(rows) < 8 {
		t.Fatalf("the walk names %d steps, want at least 8 (from the trigger to the status write)", len(rows))
	}
	for _, r := range rows {
		declared, err := declarations(filepath.Join("..", r.file))
		if err != nil {
			t.Errorf("step %q: %v", r.step, err)
			continue
		}
		for _, fn := range r.funcs {
			if !declared[fn] {
				t.Errorf("step %q: %s declares no %s", r.step, r.file, fn)
			}
		}
	}
}

// walkRow is one step of the walk: | step | `file` | `Func`, `Type.Method` |.
type walkRow struct {
	step  string
	file  string
	funcs []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// walkRows reads the rows of the table under walkHeading in the Markdown file at path.
func walkRows(t *testing.T, path string) []walkRow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), walkHeading)
	if !ok {
		t.Fatalf("%s has no %q section", path, walkHeading)
	}
	var rows []walkRow
	for _, line := range strings.Split(table, "\n")[1:] {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "|") || len(cells) != 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "-") {
			continue
		}
		file := backticked.FindStringSubmatch(cells[1])
		if file == nil {
			continue // the header row
		}
		r := walkRow{step: strings.TrimSpace(cells[0]), file: file[1]}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			r.funcs = append(r.funcs, m[1])
		}
		if len(r.funcs) == 0 {
			t.Errorf("step %q names no function", r.step)
		}
		rows = append(rows, r)
	}
	return rows
}

// declarations returns the functions (Name) and methods (Type.Name) the Go file at path
// declares.
func declarations(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = receiverType(fd.Recv.List[0].Type) + "." + name
		}
		out[name] = true
	}
	return out, nil
}

// receiverType is the type name of a method's receiver: T for T, *T, T[P] and *T[P].
func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}
