package secret

import (
	"errors"
	"strings"
	"testing"
)

func TestSealedValues(t *testing.T) {
	master, err := GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewSealer(master)
	sealed, err := s.SealValue("root_password", []byte("hunter2"))
	if err != nil || !IsSealedValue(sealed) || strings.Contains(sealed, "hunter2") {
		t.Fatalf("sealed %q, %v", sealed, err)
	}
	again, _ := s.SealValue("root_password", []byte("hunter2"))
	if again == sealed {
		t.Fatal("two seals of one value are the same bytes: the nonce is not fresh")
	}
	if plain, err := s.OpenValue("root_password", sealed); err != nil || string(plain) != "hunter2" {
		t.Fatalf("open: %q, %v", plain, err)
	}
	other, _ := GenerateMasterKey()
	o, _ := NewSealer(other)
	for name, try := range map[string]func() ([]byte, error){
		"another purpose":    func() ([]byte, error) { return s.OpenValue("api_key", sealed) },
		"another server key": func() ([]byte, error) { return o.OpenValue("root_password", sealed) },
		"damaged":            func() ([]byte, error) { return s.OpenValue("root_password", sealed[:len(sealed)-4]+"AAAA") },
		"not sealed":         func() ([]byte, error) { return s.OpenValue("root_password", "hunter2") },
	} {
		if _, err := try(); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: %v, want ErrOpen", name, err)
		}
	}
}
