# A web farm: every agent labelled role=web gets nginx and a page, with no
# change to this model when one is added; the load balancer lists them all
# from the hostgroup's hosts and their reported addresses.
#
#   tether compile examples/webfarm --inventory examples/webfarm/inventory.json
#
# web-3 in the inventory has not reported its address yet: the balancer's
# backend list waits for it (it is undefined, and the missing fact is named).
# Compile without --inventory: no agent is known, so only lb-1 is compiled.

variable "http_port" {
  type    = number
  default = 8080
}

application "static_web" {
  parameter "port" { type = number }

  package "nginx" {}

  directory "/var/www/site" {}

  file "/var/www/site/index.html" {
    content = templatefile("templates/index.html.tmpl", { name = host.name, zone = host.labels.zone })
  }

  file "/etc/nginx/conf.d/site.conf" {
    content = "server {\n  listen ${param.port};\n  root /var/www/site;\n}\n"
    requires = [package.nginx]
  }

  service "nginx" {
    state      = "running"
    enabled    = true
    subscribes = [file["/etc/nginx/conf.d/site.conf"]]
  }
}

# Selected by label: install an agent with label role=web and it is
# configured on its first compile.
hostgroup "webservers" {
  match = host.labels.role == "web"
  apply "static_web" { port = var.http_port }
}

# Every Debian host keeps its packages up to date, whatever its role.
hostgroup "debian" {
  match = try(host.facts.os.family == "debian", false)
  package "unattended-upgrades" {}
}

host "lb-1" {
  labels = { role = "lb" }

  package "haproxy" {}

  file "/etc/haproxy/haproxy.cfg" {
    content = templatefile("templates/haproxy.cfg.tmpl", {
      port     = var.http_port
      backends = hostgroup.webservers.hosts
    })
    requires = [package.haproxy]
  }

  service "haproxy" {
    state      = "running"
    subscribes = [file["/etc/haproxy/haproxy.cfg"]]
  }
}
