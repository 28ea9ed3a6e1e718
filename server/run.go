package server

import (
	"context"
	"errors"
	"sync"

	"github.com/tetherhq/tether/bus"
)

// Run ingests agents' events, runs the fan-outs of releases and leads the
// schedulers of the environments no other replica leads, until ctx ends.
// Fan-outs stop with it, recording how far they got: the leader of their
// environment resumes them.
func (s *Server) Run(parent context.Context) error {
	// The event log and the webhooks stop last, once nothing publishes:
	// the events of the stop itself are appended, and the deliveries in
	// flight end and are recorded.
	notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(parent))
	notifying := make(chan struct{})
	go func() { defer close(notifying); _ = s.RunNotify(notifyCtx) }()
	defer func() { <-notifying }()
	defer stopNotify()
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stopCompiles, err := s.compiles.Start(ctx)
	if err != nil {
		return err
	}
	// Runs after cancel below: the compile running ends with ctx.
	defer stopCompiles()
	if err := s.keys.Load(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); s.keys.Watch(ctx) }()
	go func() { defer wg.Done(); s.machines.Run(ctx) }()
	go func() { defer wg.Done(); s.ingester.Run(ctx) }()
	go func() { defer wg.Done(); s.releases.Run(ctx) }()
	go func() { defer wg.Done(); s.lead(ctx) }()
	defer wg.Wait()

	consumers := []bus.Queue{bus.QueueCompliance}
	for range s.cfg.Consumers {
		consumers = append(consumers, bus.QueueEvents)
	}
	errs := make(chan error, len(consumers))
	for _, q := range consumers {
		go func() { errs <- s.bus.ConsumeEvents(ctx, q, s.ingester.Handle) }()
	}
	err = <-errs
	cancel()
	for range len(consumers) - 1 {
		<-errs
	}
	if parent.Err() != nil || errors.Is(err, context.Canceled) {
		// Stopped: what consumers said while stopping (a closed bus)
		// is not an error.
		return context.Canceled
	}
	return err
}

// RunNotify appends published events to the stored event log, which
// the event stream follows, and sends webhook deliveries, until ctx ends;
// then it appends what is pending and finishes the deliveries in flight.
// Run runs it; a server that is not Run (a test of the API) runs it alone.
// One runs at a time: a second call waits until the first returns (or its
// own ctx ends), since two would append the same stream's events at once.
func (s *Server) RunNotify(ctx context.Context) error {
	select {
	case s.notifyTurn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.notifyTurn }()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = s.stream.Run(ctx) }()
	go func() { defer wg.Done(); _ = s.sender.Run(ctx) }()
	wg.Wait()
	return ctx.Err()
}
