# A LAMP-style web application: Apache with PHP, and MariaDB holding the
# application's database, all on one host. Compile it to see what each
# agent gets:
#
#   tether compile examples/lamp
#   tether compile examples/lamp --var site_name=shop.example -o json

variable "site_name" {
  type        = string
  default     = "app.example"
  description = "The virtual host's server name."
}

variable "db_password" {
  type        = string
  default     = "change-me"
  sensitive   = true
  description = "The application's database password; never printed in clear."
}

# The database tier: a reusable application with typed, validated parameters.
application "mariadb" {
  parameter "database" { type = string }
  parameter "user" { type = string }
  parameter "password" {
    type      = string
    sensitive = true
  }
  parameter "bind_address" {
    type    = string
    default = "127.0.0.1"
  }

  package "mariadb-server" {}

  file "/etc/mysql/mariadb.conf.d/60-tether.cnf" {
    content = "[mysqld]\nbind-address = ${param.bind_address}\n"
    mode    = "0644"
  }

  # The service is named after its package: it requires it without saying so.
  service "mariadb" {
    state      = "running"
    enabled    = true
    requires   = [package.mariadb-server]
    subscribes = [file["/etc/mysql/mariadb.conf.d/60-tether.cnf"]]
  }

  exec "create-database" {
    command  = "mysql -e \"CREATE DATABASE IF NOT EXISTS ${param.database}; GRANT ALL ON ${param.database}.* TO '${param.user}'@'localhost' IDENTIFIED BY '${param.password}'\""
    unless   = "mysql -e 'USE ${param.database}'"
    requires = [service.mariadb]
  }
}

# The web tier: Apache with PHP serving one virtual host.
application "php_site" {
  parameter "server_name" { type = string }
  parameter "port" {
    type    = number
    default = 80
    validation {
      condition     = param.port > 0 && param.port < 65536
      error_message = "port must be a TCP port (1-65535)"
    }
  }
  parameter "db_password" {
    type      = string
    sensitive = true
  }

  package "apache2" {}
  package "php" {
    for_each = toset(["libapache2-mod-php", "php-mysql"])
  }

  group "www-data" { system = true }
  user "www-data" {
    group  = "www-data"
    system = true
    home   = "/var/www"
    shell  = "/usr/sbin/nologin"
  }

  directory "docroot" {
    path  = "/var/www/${param.server_name}"
    owner = "www-data"
    mode  = "0755"
  }

  file "vhost" {
    path = "/etc/apache2/sites-enabled/${param.server_name}.conf"
    content = templatefile("templates/vhost.conf.tmpl", {
      name    = param.server_name
      port    = param.port
      docroot = "/var/www/${param.server_name}"
    })
    requires = [package.apache2]
  }

  file "config" {
    path     = "/var/www/${param.server_name}/config.php"
    content  = "<?php\n$db = new mysqli('localhost', 'app', '${param.db_password}', 'app');\n"
    owner    = "www-data"
    mode     = "0640"
    requires = [package.php]
  }

  service "apache2" {
    state      = "running"
    enabled    = true
    subscribes = [file.vhost, package.php]
  }
}

host "lamp-1" {
  labels = { role = "lamp" }

  apply "mariadb" {
    database = "app"
    user     = "app"
    password = var.db_password
  }
  apply "php_site" {
    server_name = var.site_name
    db_password = var.db_password
  }

  # A host's own resource can require one an application brings.
  file "/etc/motd" {
    content  = "${host.name}: ${var.site_name} (managed by tether)\n"
    requires = [service.apache2]
  }
}
