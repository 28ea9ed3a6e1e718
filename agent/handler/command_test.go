package handler

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
)

const secret = "$6$salt$hashhashhash"

// The host's runner refuses a command that carries one of its secrets on
// the command line, and names only the program in the refusal.
func TestCheckSecrets(t *testing.T) {
	tests := []struct {
		name string
		cmd  Command
		ok   bool
	}{
		{"in an argument", Command{Args: []string{"usermod", "--password", secret, "alice"}, Secrets: []string{secret}}, false},
		{"inside an argument", Command{Args: []string{"tool", "--password=" + secret}, Secrets: []string{"other", secret}}, false},
		{"in the label", Command{Args: []string{"sh", "/tmp/x"}, Label: "sh -c echo " + secret, Secrets: []string{secret}}, false},
		{"on standard input", Command{Args: []string{"chpasswd", "--encrypted"}, Stdin: []byte("alice:" + secret + "\n"), Secrets: []string{secret}}, true},
		{"too short to look for", Command{Args: []string{"chpasswd", "!"}, Secrets: []string{"!", ""}}, true},
		{"no secrets", Command{Args: []string{"true"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cmd.CheckSecrets()
			if tt.ok != (err == nil) {
				t.Fatalf("got %v, want ok=%v", err, tt.ok)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrSecretInArgs) || strings.Contains(err.Error(), secret) {
				t.Fatalf("got %q, want ErrSecretInArgs without the secret", err)
			}
			if _, err := (HostRunner{}).Run(context.Background(), tt.cmd); !errors.Is(err, ErrSecretInArgs) {
				t.Fatalf("HostRunner ran it: got %v, want ErrSecretInArgs", err)
			}
		})
	}
}

// A failing command's output shows in its error with the secrets hidden,
// before the output is cut to its end: a secret cut in half would show.
func TestCommandErrorHidesSecrets(t *testing.T) {
	// The last 2000 bytes of this start in the middle of the secret.
	long := secret + strings.Repeat("x", 1990)
	tests := []struct {
		name string
		out  Output
		want string
	}{
		{"stderr", Output{Stderr: []byte("bad entry alice:" + secret), ExitCode: 1}, "bad entry alice:" + model.RedactedValue},
		{"stdout", Output{Stdout: []byte(secret + secret), ExitCode: 2}, model.RedactedValue + model.RedactedValue},
		{"at the cut", Output{Stderr: []byte(long), ExitCode: 1}, "sensitive)xxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CommandError(Command{Args: []string{"chpasswd"}, Secrets: []string{secret, "hash"}}, tt.out)
			if strings.Contains(err.Error(), "hash") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %q, want %q in it and no part of the secret", err, tt.want)
			}
		})
	}
}

func TestSensitiveValues(t *testing.T) {
	r := &model.Resource{
		ID: model.MustParseID("exec[a,name=x]"),
		Attributes: model.Attributes{
			"name":    "x",
			"command": "curl -H 'token: abc'\n  deploy --now\n",
			"env":     map[string]any{"TOKEN": "abcdef", "MODE": "prod"},
			"cwd":     "/srv",
		},
		Sensitive: []string{"command", "env"},
	}
	got := SensitiveValues(r)
	for _, want := range []string{r.Attributes["command"].(string), "curl -H 'token: abc'", "deploy --now", "abcdef", "prod"} {
		if !slices.Contains(got, want) {
			t.Errorf("got %q, want %q among them", got, want)
		}
	}
	if slices.Contains(got, "/srv") {
		t.Errorf("got %q: cwd is not sensitive", got)
	}
	// A kind's always-sensitive attribute counts without being listed.
	u := &model.Resource{ID: model.MustParseID("user[a,name=alice]"), Attributes: model.Attributes{"name": "alice", "password": secret}}
	if got := SensitiveValues(u); !slices.Equal(got, []string{secret}) || u.Sensitive != nil {
		t.Fatalf("got %q (the resource now lists %q), want the password and the resource untouched", got, u.Sensitive)
	}
}

// Standard input reaches the command; without it the command reads
// /dev/null.
func TestHostRunnerStdin(t *testing.T) {
	_, err := os.Stat("/bin/sh")
	testenv.Need(t, err == nil, "/bin/sh is not on this machine")
	out := filepath.Join(t.TempDir(), "got")
	ctx := context.Background()
	if _, err := (Runtime{}).OutputOf(ctx, Command{Args: []string{"/bin/sh", "-c", `cat > "$0"`, out}, Stdin: []byte("alice:" + secret + "\n"), Secrets: []string{secret}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "alice:"+secret+"\n" {
		t.Fatalf("the command read %q", b)
	}
	got, err := (Runtime{}).OutputOf(ctx, Command{Args: []string{"/bin/sh", "-c", "wc -c"}})
	if err != nil || strings.TrimSpace(string(got)) != "0" {
		t.Fatalf("without Stdin the command read %q bytes (%v), want 0", got, err)
	}
}
