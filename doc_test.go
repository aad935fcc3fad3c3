package rdma

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package doc fits a screen before the index, and no doc comment
// breaks a word at a line's end ("busy-" then "polling"), which godoc
// renders as "busy- polling".
func TestPackageDocFitsAScreen(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/rdmanet/rdma")
	require.NoError(t, err)
	lines := strings.Count(p.Doc, "\n")
	assert.LessOrEqual(t, lines, 45, "the package doc is %d lines: details belong in docs/guide.md", lines)
	assert.Contains(t, p.Doc, "docs/guide.md")

	broken := regexp.MustCompile(`[a-z]-\n`)
	check := func(what, text string) {
		if m := broken.FindString(text); m != "" {
			t.Errorf("%s: a word broken at a line's end (%q) renders as two", what, m)
		}
	}
	check("package", p.Doc)
	for _, ty := range p.Types {
		check(ty.Name, ty.Doc)
		for _, f := range ty.Methods {
			check(ty.Name+"."+f.Name, f.Doc)
		}
		for _, f := range ty.Funcs {
			check(f.Name, f.Doc)
		}
	}
	for _, f := range p.Funcs {
		check(f.Name, f.Doc)
	}
}
