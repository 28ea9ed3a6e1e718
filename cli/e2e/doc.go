// Package e2e holds the end-to-end tests of Tether: the real `tether server`
// and `tether agent run` processes, built from this tree, on the real
// PostgreSQL and RabbitMQ, with agents behind NAT in network namespaces and
// processes killed mid-deploy, and the web console driven in a headless
// Chromium. It has no code of its own; see its tests. The virtual machine
// the tests that boot one use is built by its guest package.
package e2e
