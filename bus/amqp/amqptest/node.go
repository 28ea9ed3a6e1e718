package amqptest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus/amqp/rabbitnode"
	"github.com/tetherhq/tether/model/testenv"
)

// Private nodes (package rabbitnode) for tests: a node of a test's own
// (StartNode), or one for the tests of a package (Shared).

// ErrNoRabbitMQ is returned when rabbitmq-server is not installed.
var ErrNoRabbitMQ = rabbitnode.ErrNoRabbitMQ

// ChannelMax is the channels one connection to a private node may open
// (channel_max), as operations.md sets it on production brokers: the
// server's and agents' buses stay within it, and a client cannot open
// more.
const ChannelMax = rabbitnode.ChannelMax

// NodeOptions is what a private node is made with.
type NodeOptions = rabbitnode.Options

// Node is a running private node.
type Node = rabbitnode.Node

// StartNode starts a private node for one test; it stops, and its
// directory goes, when the test ends. Without rabbitmq-server the test
// is skipped (testenv.Need); a node that does not start fails it.
func StartNode(t testing.TB, opts NodeOptions) *Node {
	t.Helper()
	began := time.Now()
	n, err := rabbitnode.Start(opts)
	if errors.Is(err, ErrNoRabbitMQ) {
		testenv.Need(t, false, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stop RabbitMQ node %s: %v", n.Name, err)
		}
	})
	t.Logf("RabbitMQ node %s ready in %v", n.Name, time.Since(began).Round(100*time.Millisecond))
	return n
}

// Shared is one node for the tests of a package, started by the first
// test that asks for it, so a run of the package's other tests starts
// none:
//
//	var node = &amqptest.Shared{Options: amqptest.NodeOptions{TLS: true}}
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		node.Stop()
//		os.Exit(code)
//	}
//
// A test process that dies before Stop leaves nothing running (see
// Node).
type Shared struct {
	Options NodeOptions

	once sync.Once
	node *Node
	err  error
}

// Node returns the shared node, starting it on the first call. Without
// rabbitmq-server the test is skipped (testenv.Need); a node that did not
// start fails every test that asks for it.
func (s *Shared) Node(t testing.TB) *Node {
	t.Helper()
	s.once.Do(func() {
		began := time.Now()
		s.node, s.err = rabbitnode.Start(s.Options)
		if s.err == nil {
			t.Logf("shared RabbitMQ node %s ready in %v", s.node.Name, time.Since(began).Round(100*time.Millisecond))
		}
	})
	if errors.Is(s.err, ErrNoRabbitMQ) {
		testenv.Need(t, false, s.err.Error())
	}
	if s.err != nil {
		t.Fatalf("shared RabbitMQ node: %v", s.err)
	}
	return s.node
}

// Stop stops the shared node if it was started; TestMain calls it after
// m.Run. It prints why a node did not stop, there being no test to fail.
func (s *Shared) Stop() {
	s.once.Do(func() {
		s.err = errors.New("the shared node was stopped: ask for it in tests, before TestMain stops it")
	})
	if s.node != nil {
		if err := s.node.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop RabbitMQ node %s: %v\n", s.node.Name, err)
		}
	}
}
