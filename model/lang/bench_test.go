package lang

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
)

// writeFilesModel writes the model `tether bench deploy` uses: n files with
// distinct content, mode 0644.
func writeFilesModel(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	var sb strings.Builder
	sb.WriteString("variable \"out\" {\n  type = string\n  default = \"/out\"\n}\n\nhost \"local\" {\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "  file \"f%04d\" {\n    path    = \"${var.out}/f%04d\"\n    content = \"file %d: managed by tether\\n\"\n    mode    = \"0644\"\n  }\n", i, i, i)
	}
	sb.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkCompile1000Files compiles the 1000-file model of the deploy
// benchmark.
//
//	go test ./model/lang -run '^$' -bench Compile1000 -benchmem
func BenchmarkCompile1000Files(b *testing.B) {
	dir := writeFilesModel(b, 1000)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		res, err := Compile(b.Context(), dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Resources) != 1000 {
			b.Fatalf("%d resources", len(res.Resources))
		}
	}
}

// writeFleet writes a model and inventory of n agents, each getting ten
// resources from a hostgroup applying an application with templates.
func writeFleet(b *testing.B, n int) (string, *model.Inventory) {
	b.Helper()
	dir := b.TempDir()
	main := `variable "admin" { default = "ops@example.org" }

application "web" {
  parameter "port" {
    type    = number
    default = 80
    validation {
      condition     = param.port > 0 && param.port < 65536
      error_message = "port must be a TCP port"
    }
  }
  parameter "workers" { default = 4 }

  package "nginx" {}
  group "www" {}
  user "www" {
    group = "www"
    home  = "/var/www"
  }
  directory "/etc/nginx" {}
  directory "/var/www" { owner = "www" }
  file "/etc/nginx/nginx.conf" {
    content = templatefile("nginx.conf.tmpl", { port = param.port, workers = param.workers, name = host.name, ip = host.facts.ipv4 })
  }
  file "/var/www/index.html" {
    content = templatefile("index.tmpl", { h = host, admin = var.admin })
    owner   = "www"
  }
  service "nginx" {
    state      = "running"
    enabled    = true
    subscribes = [file["/etc/nginx/nginx.conf"]]
  }
  cron "logrotate-nginx" {
    command  = "/usr/sbin/logrotate /etc/logrotate.d/nginx"
    schedule = "0 * * * *"
  }
  exec "nginx-check" {
    command     = "nginx -t"
    refreshonly = true
    subscribes  = [file["/etc/nginx/nginx.conf"]]
  }
}

hostgroup "web" {
  match = host.labels.role == "web" && host.facts.os.family == "debian"
  apply "web" { port = 8080 }
}
`
	files := map[string]string{
		"main.hcl":        main,
		"nginx.conf.tmpl": "worker_processes ${workers};\nserver {\n  listen ${ip}:${port};\n  server_name ${name};\n}\n",
		"index.tmpl":      "<h1>${h.name}</h1>\n<p>${h.facts.os.family} ${h.facts.ipv4}, contact ${admin}</p>\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	inv := &model.Inventory{Agents: make([]model.InventoryAgent, n)}
	for i := range inv.Agents {
		inv.Agents[i] = model.InventoryAgent{
			Name:   fmt.Sprintf("web-%05d", i),
			Labels: map[string]string{"role": "web"},
			Facts: map[string]any{
				"ipv4": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
				"os":   map[string]any{"family": "debian", "release": "12"},
			},
		}
	}
	return dir, inv
}

// BenchmarkCompileFleet compiles 10,000 hosts × 10 resources (100,000
// resources) selected by a hostgroup from an inventory, through an
// application with parameters, a validation and two templates.
//
//	go test ./model/lang -run '^$' -bench CompileFleet -benchmem -benchtime 3x
func BenchmarkCompileFleet(b *testing.B) {
	dir, inv := writeFleet(b, 10_000)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		res, err := Compile(b.Context(), dir, Options{Inventory: inv})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Resources) != 100_000 {
			b.Fatalf("%d resources", len(res.Resources))
		}
	}
}
