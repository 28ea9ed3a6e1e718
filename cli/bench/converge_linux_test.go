//go:build linux

package bench

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// The broker's process is found by the port it listens on.
func TestBrokerPID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if got := brokerPID("amqp://guest:guest@127.0.0.1:" + strconv.Itoa(port) + "/"); got != os.Getpid() {
		t.Errorf("brokerPID of this process's port: got %d, want %d", got, os.Getpid())
	}
	if got := brokerPID("amqp://guest:guest@broker.example:5672/"); got != 0 {
		t.Errorf("brokerPID of a remote broker: got %d, want 0", got)
	}
}
