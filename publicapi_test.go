package switchyard_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// SPEC §8: the public API exposes no internal/ type. A program outside
// this module cannot name one, so a function that takes it, a field that
// holds it or an alias that renames it is a hole in the API. Each public
// package is read from the compiler's export data (go list -export), and
// every exported name is followed through its type: fields, methods,
// parameters, results, elements, type arguments and constraints.
func TestPublicAPIExposesNoInternalType(t *testing.T) {
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{with .Module}}{{.Path}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	export := map[string]string{}
	var public []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, file, _ := strings.Cut(sc.Text(), "\t")
		file, mod, _ := strings.Cut(file, "\t")
		export[path] = file
		// A package of tests only (deploy/) has no export data, and no API.
		if mod == module && file != "" && !strings.Contains(path+"/", "/internal/") &&
			!strings.HasPrefix(path, module+"/cmd/") {
			public = append(public, path)
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		if export[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(export[path])
	})
	var holes []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatal(err)
		}
		w := walker{seen: map[types.Type]bool{}}
		for _, name := range pkg.Scope().Names() {
			obj := pkg.Scope().Lookup(name)
			if !obj.Exported() {
				continue
			}
			w.where = path + "." + name
			if _, ok := obj.(*types.TypeName); ok {
				w.declared(obj.Type())
				continue
			}
			w.walk(obj.Type())
		}
		holes = append(holes, w.holes...)
	}
	if len(public) < 5 {
		t.Fatalf("public packages %v: want the library's (switchyard, client, config, jobstate, workers, …)", public)
	}
	t.Logf("public packages: %v", public)
	sort.Strings(holes)
	for _, h := range holes {
		t.Error(h)
	}
}

// module is this module's path: its packages outside internal/ and cmd/
// are the public API.
const module = "github.com/switchyard-dev/switchyard"

// walker follows the types reachable from one exported name, and notes
// each internal one it reaches.
type walker struct {
	where string
	seen  map[types.Type]bool
	holes []string
}

func (w *walker) walk(t types.Type) {
	if t == nil || w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		w.walk(types.Unalias(t))
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && strings.Contains(obj.Pkg().Path()+"/", "/internal/") {
			w.holes = append(w.holes, fmt.Sprintf("%s exposes %s.%s", w.where, obj.Pkg().Path(), obj.Name()))
			return
		}
		for i := range t.TypeArgs().Len() {
			w.walk(t.TypeArgs().At(i))
		}
		// A type of this module, declared elsewhere in its public API, is
		// followed too: what it exposes reaches this name's callers. A
		// dependency's type is its own business.
		if obj.Pkg() != nil && strings.HasPrefix(obj.Pkg().Path(), module) {
			w.declared(t)
		}
	case *types.Pointer:
		w.walk(t.Elem())
	case *types.Slice:
		w.walk(t.Elem())
	case *types.Array:
		w.walk(t.Elem())
	case *types.Chan:
		w.walk(t.Elem())
	case *types.Map:
		w.walk(t.Key())
		w.walk(t.Elem())
	case *types.Signature:
		for i := range t.TypeParams().Len() {
			w.walk(t.TypeParams().At(i).Constraint())
		}
		for i := range t.Params().Len() {
			w.walk(t.Params().At(i).Type())
		}
		for i := range t.Results().Len() {
			w.walk(t.Results().At(i).Type())
		}
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() {
				w.walk(f.Type())
			}
		}
	case *types.Interface:
		for i := range t.NumEmbeddeds() {
			w.walk(t.EmbeddedType(i))
		}
		for i := range t.NumExplicitMethods() {
			if m := t.ExplicitMethod(i); m.Exported() {
				w.walk(m.Type())
			}
		}
	case *types.Union:
		for i := range t.Len() {
			w.walk(t.Term(i).Type())
		}
	case *types.TypeParam:
		w.walk(t.Constraint())
	}
}

// declared follows a named type of the public API: what it is made of,
// and its exported methods.
func (w *walker) declared(t types.Type) {
	w.seen[t] = true
	named, ok := types.Unalias(t).(*types.Named)
	if !ok {
		w.walk(t)
		return
	}
	if t != types.Type(named) {
		w.walk(named) // an alias: of what it names
		return
	}
	for i := range named.TypeParams().Len() {
		w.walk(named.TypeParams().At(i).Constraint())
	}
	w.walk(named.Underlying())
	for i := range named.NumMethods() {
		if m := named.Method(i); m.Exported() {
			w.walk(m.Type())
		}
	}
}
