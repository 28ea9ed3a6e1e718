# A fleet the server compiles by itself (tether env source set): every agent
# labelled role=web serves a page; the load balancer lists the web agents
# with the port each reports in a custom fact (app.port, from a JSON file in
# the agent's --facts-dir), and waits for an agent's port until it is known.
#
#   tether compile examples/fleet --inventory examples/fleet/inventory.json
#
# Every path is under /srv: run the agents with --root DIR to keep them in a
# sandbox.

hostgroup "web" {
  match = host.labels.role == "web"

  directory "/srv" {}

  file "/srv/index.html" {
    content  = "served by ${host.name}\n"
    requires = [directory["/srv"]]
  }
}

hostgroup "lb" {
  match = host.labels.role == "lb"

  directory "/srv" {}

  file "/srv/backends" {
    content  = join("", [for h in hostgroup.web.hosts : "${h.name}:${h.facts.app.port}\n"])
    requires = [directory["/srv"]]
  }
}
