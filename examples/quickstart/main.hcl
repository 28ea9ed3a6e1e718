# Tether quickstart: a small static site, rendered from this model onto this
# machine. Run it with `make demo` (or `tether deploy examples/quickstart`),
# then look at the files under site_root. Run it again: nothing changes.
# Edit or delete one of the files by hand and run it once more: exactly that
# file is repaired.

variable "site_root" {
  type        = string
  default     = "/tmp/tether-quickstart"
  description = "Directory the site is written to. Try: --var site_root=/tmp/elsewhere"
}

variable "site_title" {
  type    = string
  default = "Hello from Tether"
}

# `local` is the agent that the embedded mode runs on this machine.
host "local" {
  directory "site" {
    path = var.site_root
    mode = "0755"
  }

  directory "assets" {
    path = "${var.site_root}/assets"
    mode = "0755"
  }

  # Files require the managed directory they live in without saying so.
  file "index" {
    path = "${var.site_root}/index.html"
    mode = "0644"
    content = templatefile("templates/page.html.tmpl", {
      title   = var.site_title
      heading = var.site_title
      body    = "This page was rendered from the model in examples/quickstart/main.hcl."
      links   = { "About" = "about.html" }
    })
  }

  file "about" {
    path = "${var.site_root}/about.html"
    mode = "0644"
    content = templatefile("templates/page.html.tmpl", {
      title   = "About - ${var.site_title}"
      heading = "About"
      body    = "Tether keeps hosts in the state their model describes."
      links   = { "Home" = "index.html" }
    })
  }

  file "style" {
    path    = "${var.site_root}/assets/style.css"
    mode    = "0644"
    content = file("files/style.css")
  }

  file "manifest" {
    path = "${var.site_root}/site.json"
    mode = "0644"
    content = jsonencode({
      title = var.site_title
      pages = ["index.html", "about.html"]
    })
  }

  file "robots" {
    path     = "${var.site_root}/robots.txt"
    mode     = "0644"
    content  = "User-agent: *\nDisallow:\n"
    requires = [file.index]
  }
}
