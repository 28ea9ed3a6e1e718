package builtin

import (
	"fmt"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Every built-in kind the compiler knows has a handler, and no handler claims
// a kind the compiler does not know.
func TestEveryKindHasAHandler(t *testing.T) {
	reg, err := Registry(handler.Runtime{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, k := range model.Kinds() {
		kinds = append(kinds, k.Kind)
	}
	if got, want := fmt.Sprint(reg.Kinds()), fmt.Sprint(kinds); got != want {
		t.Fatalf("handlers for %s, kinds declared %s", got, want)
	}
	if err := Register(reg, handler.Runtime{}); err == nil {
		t.Fatal("registering the built-ins twice succeeded")
	}
}
