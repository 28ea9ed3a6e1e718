package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

func testSources(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	if _, err := s.GetSource(ctx, "prod", false); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("no source yet: %v, want ErrNotFound", err)
	}
	git := record.Source{Env: "prod", Kind: record.SourceGit, Spec: []byte(`{"url":"https://git.example/fleet.git","token":"s3cret"}`),
		WebhookSecret: "whsec_abc", PollInterval: time.Minute, UpdatedBy: "alice"}
	refused := []struct {
		name string
		src  record.Source
		want error
	}{
		{"unknown environment", record.Source{Env: "nope", Kind: record.SourceGit, Spec: []byte("{}")}, model.ErrNotFound},
		{"unknown kind", record.Source{Env: "prod", Kind: "svn", Spec: []byte("{}")}, model.ErrInvalid},
		{"no description", record.Source{Env: "prod", Kind: record.SourceGit}, model.ErrInvalid},
		{"archive without data", record.Source{Env: "prod", Kind: record.SourceArchive, Spec: []byte("{}")}, model.ErrInvalid},
		{"poll too often", record.Source{Env: "prod", Kind: record.SourceGit, Spec: []byte("{}"), PollInterval: time.Second}, model.ErrInvalid},
		{"archive polled", record.Source{Env: "prod", Kind: record.SourceArchive, Spec: []byte("{}"), Archive: []byte("x"), PollInterval: time.Minute}, model.ErrInvalid},
	}
	for _, tt := range refused {
		if _, err := s.PutSource(ctx, tt.src); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := s.PutSource(ctx, git); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSource(ctx, "prod", true)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != record.SourceGit || !bytes.Equal(got.Spec, git.Spec) || got.WebhookSecret != "whsec_abc" || got.PollInterval != time.Minute ||
		got.UpdatedBy != "alice" || got.UpdatedAt.IsZero() || len(got.Archive) != 0 || got.ArchiveSize != 0 {
		t.Fatalf("stored git source read back as %+v", got)
	}

	// Replaced by an archive: the git fields go, the archive is read only
	// when asked for.
	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 300_000)
	arch := record.Source{Env: "prod", Kind: record.SourceArchive, Spec: []byte(`{"subdir":"fleet"}`), Archive: data, ArchiveSHA256: "abc", UpdatedBy: "bob"}
	if _, err := s.PutSource(ctx, arch); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetSource(ctx, "prod", false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != record.SourceArchive || got.Archive != nil || got.ArchiveSize != int64(len(data)) || got.ArchiveSHA256 != "abc" || got.WebhookSecret != "" || got.PollInterval != 0 {
		t.Fatalf("archive source without its data: %+v", got)
	}
	if got, err = s.GetSource(ctx, "prod", true); err != nil || !bytes.Equal(got.Archive, data) {
		t.Fatalf("archive read back: %d bytes (%v), want %d", len(got.Archive), err, len(data))
	}

	if _, err := s.PutSource(ctx, record.Source{Env: "dev", Kind: record.SourceGit, Spec: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSources(ctx)
	if err != nil || len(list) != 2 || list[0].Env != "dev" || list[1].Env != "prod" || list[1].Archive != nil {
		t.Fatalf("list: %+v (%v)", list, err)
	}

	if err := s.DeleteSource(ctx, "dev"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSource(ctx, "dev"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleted twice: %v, want ErrNotFound", err)
	}
	// An environment takes its source with it.
	if err := s.DeleteEnv(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if list, err := s.ListSources(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after the environments went: %+v (%v)", list, err)
	}
}
