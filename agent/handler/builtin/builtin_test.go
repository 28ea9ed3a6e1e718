package builtin

import (
	"fmt"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// withoutHandler lists the kinds the compiler knows that have no handler:
// agents would report their resources unavailable. It is empty: every
// built-in kind has its handler.
var withoutHandler = map[string]bool{}

// Every built-in kind the compiler knows has a handler (but those listed in
// withoutHandler), and no handler claims a kind the compiler does not know.
func TestEveryKindHasAHandler(t *testing.T) {
	reg, err := Registry(handler.Runtime{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, k := range model.Kinds() {
		if !withoutHandler[k.Kind] {
			kinds = append(kinds, k.Kind)
		}
	}
	if got, want := fmt.Sprint(reg.Kinds()), fmt.Sprint(kinds); got != want {
		t.Fatalf("handlers for %s, kinds declared %s", got, want)
	}
	if err := Register(reg, handler.Runtime{}); err == nil {
		t.Fatal("registering the built-ins twice succeeded")
	}
}
