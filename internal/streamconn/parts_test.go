package streamconn

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxMethods bounds the methods of any one type of the engine: a Conn
// that gathers every feature's behaviour again (it had 104) is what the
// parts (sender, receiver, rendezvous, remoteOps, registrations,
// growing, handshake, watch) are there to prevent.
const maxMethods = 40

// TestNoTypeGathersTheEngine counts the methods declared on each type
// of the package's non-test files.
func TestNoTypeGathersTheEngine(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	methods := map[string]int{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			typ := fd.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				methods[id.Name]++
			}
		}
	}
	require.NotZero(t, methods["Conn"], "Conn's methods were not found")
	for typ, n := range methods {
		require.LessOrEqual(t, n, maxMethods, "%s has %d methods", typ, n)
	}
}
