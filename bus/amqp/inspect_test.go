package amqp

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A silent inbox consumer that finds messages waiting takes its
// subscription for lost only when the next look finds them waiting too:
// a busy broker may not have delivered yet what was just sent.
func TestInspectedWaitsForASecondLook(t *testing.T) {
	waiting := false
	if err := inspected(amqp.Queue{Messages: 1, Consumers: 1}, nil, &waiting, 1); err != nil || !waiting {
		t.Fatalf("first look at a message waiting: %v (waiting %v), want to look again", err, waiting)
	}
	if err := inspected(amqp.Queue{Messages: 2, Consumers: 1}, nil, &waiting, 2); !errors.Is(err, errDropped) {
		t.Fatalf("second look, messages still waiting and none came: %v, want errDropped", err)
	}
	// Delivered between the looks: nothing waits at the second.
	waiting = false
	_ = inspected(amqp.Queue{Messages: 1, Consumers: 1}, nil, &waiting, 1)
	if err := inspected(amqp.Queue{Consumers: 1}, nil, &waiting, 2); err != nil || waiting {
		t.Fatalf("second look, the queue empty: %v (waiting %v), want to go on", err, waiting)
	}
	// A queue gone, or without a consumer, ends it at once.
	if err := inspected(amqp.Queue{}, &amqp.Error{Code: amqp.NotFound}, &waiting, 1); !errors.Is(err, errDropped) {
		t.Fatalf("queue gone: %v, want errDropped", err)
	}
	if err := inspected(amqp.Queue{Messages: 1}, nil, &waiting, 1); !errors.Is(err, errDropped) {
		t.Fatalf("no consumer: %v, want errDropped", err)
	}
	// Now and then a silent consumer subscribes again, unless it looks
	// again at messages waiting first.
	waiting = false
	if err := inspected(amqp.Queue{Consumers: 1}, nil, &waiting, resubscribeEvery); !errors.Is(err, errSilent) {
		t.Fatalf("silent check %d: %v, want errSilent", resubscribeEvery, err)
	}
}
