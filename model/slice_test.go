package model

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestSlicesAndDiff(t *testing.T) {
	v1 := []Resource{
		fileRes("a", "/1", "one"),
		fileRes("a", "/2", "two"),
		fileRes("b", "/1", "one"),
	}
	v2 := []Resource{
		fileRes("a", "/1", "one"),     // unchanged
		fileRes("a", "/2", "TWO"),     // changed
		fileRes("a", "/3", "three"),   // new
		fileRes("b", "/1", "one-new"), // other agent
	}
	from := SliceOf("a", 1, v1)
	to := SliceOf("a", 2, v2)
	d, err := DiffSlices(from, to)
	if err != nil {
		t.Fatal(err)
	}
	if d.From != 1 || d.To != 2 {
		t.Fatalf("generations %d→%d, want 1→2", d.From, d.To)
	}
	var ups []string
	for _, r := range d.Upserts {
		ups = append(ups, r.ID.Value)
	}
	if fmt.Sprint(ups) != "[/2 /3]" || len(d.Deletes) != 0 {
		t.Fatalf("upserts %v deletes %v, want [/2 /3] []", ups, d.Deletes)
	}

	back, err := DiffSlices(to, from)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Deletes) != 1 || back.Deletes[0].Value != "/3" {
		t.Fatalf("reverse deletes = %v, want [/3]", back.Deletes)
	}

	all := Slices(2, v2)
	if len(all) != 2 || len(all["a"].Resources) != 3 || len(all["b"].Resources) != 1 {
		t.Fatalf("Slices = %v", all)
	}
	if got := Agents(v2); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("Agents = %v", got)
	}
}

func TestApplyRejectsWrongGeneration(t *testing.T) {
	s := Slice{Agent: "a", Generation: 3}
	_, err := s.Apply(Diff{From: 2, To: 4})
	if !errors.Is(err, ErrGenerationMismatch) {
		t.Fatalf("got %v, want ErrGenerationMismatch", err)
	}
	_, err = s.Apply(Diff{From: 3, To: 4, Upserts: []Resource{fileRes("b", "/x", "")}})
	if err == nil {
		t.Fatal("applying another agent's resource succeeded")
	}
}

// TestDiffApplyProperty checks Apply(from, DiffSlices(from, to)) == to over
// random slices.
func TestDiffApplyProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(gen int64) Slice {
		var rs []Resource
		for i := 0; i < 30; i++ {
			if rng.IntN(2) == 0 {
				rs = append(rs, fileRes("a", fmt.Sprintf("/f%d", i), fmt.Sprint(rng.IntN(3))))
			}
		}
		return SliceOf("a", gen, rs)
	}
	for i := 0; i < 200; i++ {
		from, to := random(int64(i)), random(int64(i+1))
		d, err := DiffSlices(from, to)
		if err != nil {
			t.Fatal(err)
		}
		got, err := from.Apply(d)
		if err != nil {
			t.Fatal(err)
		}
		hg, _ := got.Hash()
		ht, _ := to.Hash()
		if hg != ht || got.Generation != to.Generation || len(got.Resources) != len(to.Resources) {
			t.Fatalf("round %d: apply(diff) gave %d resources (hash %s), want %d (hash %s)", i, len(got.Resources), hg, len(to.Resources), ht)
		}
	}
}

func TestSetHashIgnoresOrder(t *testing.T) {
	a := []Resource{fileRes("a", "/1", "x"), fileRes("a", "/2", "y")}
	b := []Resource{a[1], a[0]}
	ha, _ := SetHash(a)
	hb, _ := SetHash(b)
	if ha != hb {
		t.Fatal("set hash depends on order")
	}
	hc, _ := SetHash(a[:1])
	if hc == ha {
		t.Fatal("set hash ignores a missing resource")
	}
	if err := ValidateSet(append(a, a[0])); err == nil {
		t.Fatal("ValidateSet accepted a duplicate ID")
	}
}
