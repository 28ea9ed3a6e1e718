// Package record holds the server's records and the requests about them:
// environments and their settings, agents as the server knows them, resource
// statuses and actions, alerts, API and enrollment tokens, audit entries,
// query filters, deploy requests, releases and compile reports, and the
// records of machines made from blueprints (platforms, distributions, hosts,
// instances). The store, the scheduler, the
// API and the command line share them; agents never see them.
package record
