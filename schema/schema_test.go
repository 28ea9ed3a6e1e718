package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

func TestMigrations(t *testing.T) {
	for name, load := range map[string]func() ([]Migration, error){"sqlite": SQLite, "postgres": Postgres} {
		t.Run(name, func(t *testing.T) {
			ms, err := load()
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 0 || ms[0].Version != 1 || !strings.Contains(ms[0].SQL, "CREATE TABLE environments") {
				t.Fatalf("migrations %+v", ms)
			}
			for _, m := range ms {
				if m.Name == "" || strings.TrimSpace(m.SQL) == "" {
					t.Fatalf("migration %d is empty or unnamed", m.Version)
				}
			}
		})
	}
}

// released is the SHA-256 of every migration file as it was released. A
// database that applied a migration records only its number, so an edited
// file would never reach it: a change is always a new migration. A new file
// is added here in the commit that adds it.
var released = map[string]string{
	"postgres/0001_init.sql":                 "d535ec93851589193a9de58e3f5297e890e513bd506a0efc847d15cd2a116f92",
	"postgres/0002_agents.sql":               "7a05ead2b897c95fb216fa4195f097a90354a455196dadcc0a502548ede20aed",
	"postgres/0003_sequences.sql":            "fc4752bf66d6ec9b3d09bc632ee87ff3ab4a3b04158ee084c0c767f04f7c87d8",
	"postgres/0004_align.sql":                "f3a6ccf7f1c252e139a5b45bd2cb01857fcedd39ff8a3c6e9d648388fc6b7acd",
	"postgres/0005_compiles.sql":             "bb0f5e1718ae6930811ec5329e94e436322798b50c2a937c3b3f7fc7fb5fd095",
	"postgres/0006_sources.sql":              "97d28185bcab2bf1fa98c4dde4627297e4afd8c5fe4c71245194b604ae0d9a5f",
	"postgres/0008_key_agreement.sql":        "282f3ed995dd345adbe8f0449f58f06f0bf0444c94317579b872143644919623",
	"postgres/0009_key_rollover.sql":         "f50311fab58dce33ca9db91c5456fec359bdc8f35b7460f03cbe6277b3cd287d",
	"postgres/0011_signing_keys.sql":         "e348ee9c9ea3865f445ff5fdcf3f42396b5265a17f22db6f686db0488438c1d6",
	"postgres/0012_releases.sql":             "beaa1adad3d6c0202da05b7d82921c6eacfa2af602919d51c50a213048e13014",
	"postgres/0018_people.sql":               "fa425a7e9c60ec9c2fd3e0a63fbb00740f1d9294a7a3ffb4b714a05747f53087",
	"postgres/0014_deploys.sql":              "b017e747ce62fb9865401b08d729b299f51ba012f74a785f23f426ef46dafa98",
	"postgres/0019_notify.sql":               "d0fda580b75e50a2bf4c9c28ee32e2ccf57461fcbaf4d021a57f4ad40b724d72",
	"postgres/0013_actions_at.sql":           "978f80ca829a88ba51c2ff1ba327f55364a1b7124c436b0b9d787d4784829d3d",
	"postgres/0015_rollouts.sql":             "c5ef6cbe088a7c480082a77ddad2249c67c8ce648f1d5aaddefa1234ac7d052a",
	"postgres/0017_agent_note.sql":           "3637c77cad18b1fc87eecdc7f87e6479984d18112aca88f235b373bd6e66af77",
	"postgres/0020_agent_version.sql":        "7b2467da673d60122fcd188565ddfb931dd743dbb9934f922531872387415c48",
	"postgres/0021_status_filters.sql":       "e5d4edb981e2181b7db0119bd4ee550a5111b388e2a269d46354a0d01e5c8156",
	"postgres/0022_agent_changes.sql":        "063e3d7faead3441a7705811856f05948923574e4babc3f2091614e77c945b26",
	"postgres/0023_facts_seq.sql":            "e2246aa36922ac00a0b486441aa9855d7342ffeee5bed240d2db6d3c5eea5fc0",
	"postgres/0024_release_keys.sql":         "03ff1e5a51aa2e3b5a562e0d5355ebeb043a3460daddd931e40705380b96c066",
	"postgres/0025_compile_skips.sql":        "37a692c893dbb8de1c391fabe7e8c303014ec7282ca9f98318ef2fb7ea2dbc17",
	"postgres/0026_machines.sql":             "1b8c47efff338dd0740bf694411fd169a77c11ba15b87b86846b9f9b685d79aa",
	"postgres/0027_host_tokens.sql":          "efe6447daf2f6712704a9dbd1e97fe3b5d5a139615e137f3fd2a72de265edaaa",
	"postgres/0028_machine_applications.sql": "e3075b31e0d4fc27a37856e191c5b3cfba814ba5d78eee7ffc187d81dcf73686",
	"postgres/0029_own_agent_tokens.sql":     "1230b3c5f16d00349ee7511c11c34cdaa5029560549f37ca5bfa26e64e40e0c6",
	"sqlite/0001_init.sql":                   "f3cec3468c9496202adc82f49736e3e7723b960b83b9130d65967950e8c29a77",
	"sqlite/0002_server.sql":                 "d0abe1ca7f9f0207baa2f99bb56ca4849a8e993ad87bcf3638091c60e16ade43",
	"sqlite/0003_agents.sql":                 "c93be0e3d4a40e6312f343c523b22cad4241ff3f47ce4cab1d132bc34fd2a16d",
	"sqlite/0004_sequences.sql":              "f3ab4f145496cea536e60744382d68ffcf639c23771a21f8b03468adb5498a8b",
	"sqlite/0005_compiles.sql":               "356bdbdd1a594645260ca73308268f3207835a1a04a9402a384cb51cfa262958",
	"sqlite/0006_sources.sql":                "19245e54c932cc611d981a58edd5a1ef349a4bccba89023f44204003b3904f75",
	"sqlite/0008_key_agreement.sql":          "cf435b8a9e14ad74667a988570b9bc2a5608e8e21653f8a11e18d6cb0a7f18b9",
	"sqlite/0009_key_rollover.sql":           "16cf2d24e3f0b1468fcd5e07788f619f5295510302ef6c7184bbb0e80bdf49cb",
	"sqlite/0011_signing_keys.sql":           "8daf04a68ef69607c9b31b35fd976d3c5ba5b21c6310b535cd71264e292fb25e",
	"sqlite/0012_releases.sql":               "361dbd9c7842c3d6c246c79f39c0e97f5a76e9ad8ed5a4a43902ad5d9b24a634",
	"sqlite/0018_people.sql":                 "83014161d0e6d283e27b1a5250d261ad0b75f766344370ee052184a1107bcc64",
	"sqlite/0014_deploys.sql":                "cd7e59801b15901d6dc08ea61032f97e6b9b5f55776270934160179360aa8fb8",
	"sqlite/0019_notify.sql":                 "f11c7ea8c831959c412fddde3f7e2311b16ef48ae5af2d7a6ddb858ace50ffdf",
	"sqlite/0013_actions_at.sql":             "978f80ca829a88ba51c2ff1ba327f55364a1b7124c436b0b9d787d4784829d3d",
	"sqlite/0015_rollouts.sql":               "90475da4034387a6dd428aba26dfc1c97e4950ab3b65dc56b27a6cafa5418013",
	"sqlite/0017_agent_note.sql":             "3637c77cad18b1fc87eecdc7f87e6479984d18112aca88f235b373bd6e66af77",
	"sqlite/0020_agent_version.sql":          "7b2467da673d60122fcd188565ddfb931dd743dbb9934f922531872387415c48",
	"sqlite/0021_status_filters.sql":         "e5d4edb981e2181b7db0119bd4ee550a5111b388e2a269d46354a0d01e5c8156",
	"sqlite/0022_agent_changes.sql":          "3eaccc7302b446677c0af644970abea4cbd719e90232ec176f06bcdfe226f123",
	"sqlite/0023_facts_seq.sql":              "e2246aa36922ac00a0b486441aa9855d7342ffeee5bed240d2db6d3c5eea5fc0",
	"sqlite/0024_release_keys.sql":           "19b8e7995211c167e53657cd4f3e490afa84a31b951a7c3fa76a1c32b4dce3c4",
	"sqlite/0025_compile_skips.sql":          "41d237d4dda6c07ed994c8245b7a011979bb53f54cca4f934fcbfe60dbdbf098",
	"sqlite/0026_machines.sql":               "b5a22cab5671b824c2f32b848ff72eefc98a7d8dff42fdf3c5e11b7b0085d932",
	"sqlite/0027_host_tokens.sql":            "efe6447daf2f6712704a9dbd1e97fe3b5d5a139615e137f3fd2a72de265edaaa",
	"sqlite/0028_machine_applications.sql":   "3d2b4cf3bd9e74b26c854a21c1d631ce29664631063efb541c7056a9e367c4fe",
	"sqlite/0029_own_agent_tokens.sql":       "1230b3c5f16d00349ee7511c11c34cdaa5029560549f37ca5bfa26e64e40e0c6",
}

func TestReleasedMigrationsUnchanged(t *testing.T) {
	seen := map[string]bool{}
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		got := hex.EncodeToString(sum[:])
		seen[name] = true
		switch want, ok := released[name]; {
		case !ok:
			t.Errorf("schema/%s is not in released (schema_test.go): add\n\t%q: %q,", name, name, got)
		case got != want:
			t.Errorf("schema/%s changed after its release (SHA-256 %s, released as %s): databases that applied it will not apply the change; restore the file and add a new migration instead", name, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range released {
		if !seen[name] {
			t.Errorf("schema/%s was released and is gone: databases record it as applied; restore it and add a new migration instead", name)
		}
	}
}

// historical is what the stores did differently before their steps were
// compared, frozen: SQLite's 0002_server added what PostgreSQL's 0001_init
// created from the start, and PostgreSQL's 0004_align, empty, evened the
// count. Nothing is ever added here.
var historical = struct {
	last   int                 // the last step numbered differently
	onlyIn map[string][]string // store: steps the other does not have
}{
	last:   4,
	onlyIn: map[string][]string{"sqlite": {"0002_server"}, "postgres": {"0004_align"}},
}

// TestStoresHaveTheSameSteps: both stores make the same schema changes in
// the same order. Up to historical.last the steps match by name, apart from
// the frozen differences; from there on every step has the same number and
// name in both.
func TestStoresHaveTheSameSteps(t *testing.T) {
	sq, err := SQLite()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := Postgres()
	if err != nil {
		t.Fatal(err)
	}
	shared := func(store string, ms []Migration) (names []string) {
		for _, m := range ms[:min(historical.last, len(ms))] {
			if !slices.Contains(historical.onlyIn[store], stepName(m)) {
				names = append(names, m.Name)
			}
		}
		return names
	}
	if a, b := shared("sqlite", sq), shared("postgres", pg); !slices.Equal(a, b) {
		t.Fatalf("steps up to %04d: sqlite %v, postgres %v: a step up to there was renamed or removed (restore it)", historical.last, a, b)
	}
	for i := historical.last; i < max(len(sq), len(pg)); i++ {
		switch {
		case i >= len(sq):
			t.Errorf("postgres/%[1]s.sql has no sqlite/%[1]s.sql: every step is written for both stores", stepName(pg[i]))
		case i >= len(pg):
			t.Errorf("sqlite/%[1]s.sql has no postgres/%[1]s.sql: every step is written for both stores", stepName(sq[i]))
		case sq[i].Name != pg[i].Name:
			t.Errorf("step %04d is %q in sqlite and %q in postgres: a step has one number and one name in both stores", sq[i].Version, sq[i].Name, pg[i].Name)
		}
	}
}

func stepName(m Migration) string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }
