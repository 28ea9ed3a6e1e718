# A module: ./modules/ntp is a self-contained bundle (its own variables,
# application and template). Its applications are applied as ntp.NAME.
# A module from git works the same way, pinned to a ref:
#
#   module "ntp" {
#     source = "git::https://git.example.org/tether-modules/ntp.git"
#     ref    = "v1.4.0"
#   }
#
#   tether compile examples/modules

module "ntp" {
  source = "./modules/ntp"
  inputs = {
    servers = ["0.pool.ntp.org", "1.pool.ntp.org"]
  }
}


host "app-1" {
  apply "ntp.client" {}
}

host "app-2" {
  apply "ntp.client" { max_offset_ms = 50 }
}

host "time-1" {
  apply "ntp.client" { serve_clients = true }
}
