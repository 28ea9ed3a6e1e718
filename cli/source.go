package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/record"
)

// sourceCommand is `tether env source`: where the server reads the
// environment's model for the compiles it runs itself.
func sourceCommand(term *terminal) *ucli.Command {
	fileFlag := func(name, env, usage string) ucli.Flag {
		return &ucli.StringFlag{Name: name, EnvVars: []string{env}, Usage: usage}
	}
	return &ucli.Command{
		Name:  "source",
		Usage: "where the server reads the environment's model: a git repository or an uploaded directory",
		Description: "With a source, the server compiles the model itself: when the source is set, on\n" +
			"`tether env compile`, on a push webhook, every poll interval, and whenever an agent is\n" +
			"accepted or rejected or its facts or labels change. Credentials are write-only: they are\n" +
			"read from files (or TETHER_GIT_* variables) and never shown again.\n\n" +
			"   tether env source set https://git.example.com/ops/fleet.git --ref main --token-file ~/.git-token\n" +
			"   tether env source set ssh://git@git.example.com/ops/fleet.git --ssh-key-file KEY --known-hosts-file HOSTS\n" +
			"   tether env source upload ./fleet\n" +
			"   tether env source show",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "set", "make a git repository the source (compiled at once)", "URL", []ucli.Flag{
				&ucli.StringFlag{Name: "ref", Usage: "`BRANCH`, tag or commit id to follow (default: the repository's default branch)"},
				&ucli.StringFlag{Name: "subdir", Usage: "the model's `DIR` inside the repository"},
				&ucli.StringFlag{Name: "username", Usage: "user `NAME` that goes with the token (default git; GitLab wants oauth2 for OAuth tokens)"},
				fileFlag("token-file", "TETHER_GIT_TOKEN_FILE", "read the HTTPS access token from `FILE` (- for standard input)"),
				fileFlag("ssh-key-file", "TETHER_GIT_SSH_KEY_FILE", "read the SSH private key (PEM, unencrypted) from `FILE`"),
				fileFlag("known-hosts-file", "TETHER_GIT_KNOWN_HOSTS_FILE", "known_hosts `FILE` the SSH server's key must match (ssh-keyscan HOST > FILE)"),
				fileFlag("ca-file", "TETHER_GIT_CA_FILE", "PEM `FILE` of certificates to trust for https besides the system's"),
				&ucli.StringFlag{Name: "poll", Usage: "also ask the repository for new commits every `INTERVAL` (e.g. 5m; 0: never)"},
				fileFlag("webhook-secret-file", "TETHER_WEBHOOK_SECRET_FILE", "use the webhook secret in `FILE` instead of one the server makes"),
				&ucli.BoolFlag{Name: "rotate-webhook-secret", Usage: "make a new webhook secret (the old one stops working)"},
				&ucli.BoolFlag{Name: "no-credentials", Usage: "drop the token or key the source has"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/source")
				if err != nil {
					return err
				}
				req := record.SourceRequest{URL: c.Args().First(), Ref: c.String("ref"), Subdir: c.String("subdir"), Username: c.String("username"),
					PollInterval: c.String("poll"), RotateWebhookSecret: c.Bool("rotate-webhook-secret"), NoCredentials: c.Bool("no-credentials")}
				for _, f := range []struct {
					flag string
					to   *string
				}{{"token-file", &req.Token}, {"ssh-key-file", &req.SSHKey}, {"known-hosts-file", &req.KnownHosts}, {"ca-file", &req.CABundle}, {"webhook-secret-file", &req.WebhookSecret}} {
					if *f.to, err = readSecretFile(term, c.String(f.flag), f.flag); err != nil {
						return err
					}
				}
				var v record.SourceView
				if err := cl.call(c.Context, "PUT", p, req, &v); err != nil {
					return err
				}
				return showSource(term, cl, v, asJSON, true)
			}),
			remoteCommand(term, "upload", "upload a model directory (or a .tar/.tar.gz) as the source (compiled at once)", "DIR", []ucli.Flag{
				&ucli.StringFlag{Name: "subdir", Usage: "the model's `DIR` inside an uploaded archive file"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/source/archive")
				if err != nil {
					return err
				}
				data, subdir, err := sourceArchive(term, c.Args().First(), c.String("subdir"))
				if err != nil {
					return err
				}
				if subdir != "" {
					p += "?subdir=" + url.QueryEscape(subdir)
				}
				var v record.SourceView
				if err := cl.send(c.Context, "PUT", p, "application/gzip", data, &v); err != nil {
					return err
				}
				return showSource(term, cl, v, asJSON, true)
			}),
			remoteCommand(term, "show", "show the source (credentials only as set or not)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/source")
				if err != nil {
					return err
				}
				var v record.SourceView
				if err := cl.call(c.Context, "GET", p, nil, &v); err != nil {
					return err
				}
				return showSource(term, cl, v, asJSON, false)
			}),
			remoteCommand(term, "delete", "remove the source: the server compiles the model no more (what it released stays)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/source")
				if err != nil {
					return err
				}
				if err := cl.call(c.Context, "DELETE", p, nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(term.stderr, "source of %s removed\n", cl.env)
				return nil
			}),
		},
	}
}

// readSecretFile reads the credential file of flag ("" : none, "-":
// standard input), without its trailing newline.
func readSecretFile(term *terminal, name, flag string) (string, error) {
	if name == "" {
		return "", nil
	}
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return "", usageError("--%s: %v", flag, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func showSource(term *terminal, cl *client, v record.SourceView, asJSON, changed bool) error {
	if asJSON {
		return writeJSON(term.stdout, v)
	}
	yes := func(b bool) string {
		if b {
			return "set"
		}
		return "-"
	}
	t := newTable(term, "FIELD", "VALUE")
	t.row("kind", v.Kind)
	if v.Kind == record.SourceGit {
		ref := v.Ref
		if ref == "" {
			ref = "(default branch)"
		}
		t.row("url", v.URL)
		t.row("ref", ref)
		t.row("subdir", orDash(v.Subdir))
		t.row("token", yes(v.HasToken))
		t.row("ssh key", yes(v.HasSSHKey))
		t.row("poll", orDash(v.PollInterval))
		t.row("webhook", yes(v.HasWebhook))
	} else {
		t.row("archive", fmt.Sprintf("%s, sha256 %s", humanBytes(v.ArchiveBytes), v.ArchiveSHA256))
		t.row("subdir", orDash(v.Subdir))
	}
	t.row("updated", v.UpdatedAt.Local().Format(time.DateTime)+" by "+v.UpdatedBy)
	if err := t.flush(); err != nil {
		return err
	}
	if v.WebhookSecret != "" {
		fmt.Fprintf(term.stdout, "\nPush webhook (the secret is shown this once; keep it in your git host's webhook settings):\n")
		fmt.Fprintf(term.stdout, "  URL:    %s%s\n", cl.base, v.WebhookPath)
		fmt.Fprintf(term.stdout, "  secret: %s\n", v.WebhookSecret)
	}
	if changed {
		fmt.Fprintf(term.stderr, "compiling: follow it with tether compiles list, or tether env compile --wait\n")
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// skippedInUpload are the names an uploaded directory leaves out: version
// control, the project's .tether (its module cache), and its .tether.toml
// (the API token it may hold).
var skippedInUpload = map[string]bool{".git": true, stateDirName: true, projectConfigName: true, ".hg": true, ".svn": true}

// sourceArchive returns what `source upload` sends: the archive file as it
// is, or the directory packed as tar.gz (regular files, directories and
// symbolic links, as they are; the server refuses links that lead out).
func sourceArchive(term *terminal, path, subdir string) ([]byte, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", usageError("%v", err)
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		return b, subdir, err
	}
	if subdir != "" {
		return nil, "", usageError("--subdir is for an archive file; for a directory, name the model's directory itself")
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	files := 0
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(path, p)
		if err != nil || rel == "." {
			return err
		}
		if skippedInUpload[d.Name()] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return fmt.Errorf("%s is neither a file, a directory nor a link: move it out of the model", p)
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
			files++
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, "", fmt.Errorf("pack %s: %w", path, err)
	}
	fmt.Fprintf(term.stderr, "uploading %s: %d files, %s compressed\n", path, files, humanBytes(int64(buf.Len())))
	return buf.Bytes(), "", nil
}
