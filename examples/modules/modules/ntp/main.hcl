# An NTP client (chrony), as a module. Its input is the list of servers.

variable "servers" {
  type        = list(string)
  description = "NTP servers to follow."
  validation {
    condition     = length(var.servers) > 0
    error_message = "give at least one NTP server"
  }
}

application "client" {
  parameter "max_offset_ms" {
    type    = number
    default = 100
  }
  parameter "serve_clients" {
    type    = bool
    default = false
  }

  package "chrony" {}

  file "/etc/chrony/chrony.conf" {
    content = templatefile("chrony.conf.tmpl", {
      servers       = var.servers
      max_offset    = param.max_offset_ms / 1000
      serve_clients = param.serve_clients
    })
    mode = "0644"
  }

  service "chrony" {
    state      = "running"
    enabled    = true
    subscribes = [file["/etc/chrony/chrony.conf"]]
  }
}
