package server

import (
	"context"
	"net/http"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// readiness is what a bus may say of its connection.
type readiness interface {
	Ready(ctx context.Context) error
}

// consumption is what a bus may say of the server's consumers: nil when
// every consumer of a server queue is subscribed, else which queue, since
// when and why not.
type consumption interface {
	Consuming(q bus.Queue) error
}

// APIServices wires the API to the server: reads go to the store, changes
// with consequences through the server. metrics serves /metrics (nil: none).
//
// /readyz checks the store, the broker, and that the server consumes both
// of its queues: a server whose queue was deleted on the broker, and is
// not consumed again yet, is not ready (503, naming the queue and since
// when), even though its connection is fine.
func APIServices(s *Server, metrics http.Handler) api.Services {
	ready := map[string]func(context.Context) error{"store": s.store.Ping}
	if r, ok := s.bus.(readiness); ok {
		ready["broker"] = r.Ready
	}
	if c, ok := s.bus.(consumption); ok {
		ready["events_queue"] = func(context.Context) error { return c.Consuming(bus.QueueEvents) }
		ready["compliance_queue"] = func(context.Context) error { return c.Consuming(bus.QueueCompliance) }
	}
	svc := api.Services{
		Envs:       envService{s},
		Settings:   s,
		Versions:   s.store,
		Exporter:   exportService{s},
		Releases:   s,
		Resources:  s.store,
		Agents:     s.store,
		Control:    s,
		Operations: s,
		Plans:      s,
		Records:    s.store,
		Tokens:     s.store,
		People:     s.store,
		Enrollment: s.store,
		Events:     s,
		Webhooks:   s,
		Alerts:     s,
		Compiles:   s,
		Machines:   s.machines,
		Ready:      ready,
		Metrics:    metrics,
		Observer:   s.metrics,
		ServerKey:  s.PublicKey,
		SigningKey: s,
	}
	if s.cfg.Sources != nil {
		svc.Sources = s
	}
	return svc
}

// exportService stores versions uploaded, and releases them.
type exportService struct{ *Server }

func (e exportService) Upload(env string) api.Upload { return e.Server.Upload(env) }

// envService reads environments from the store and changes them through
// the server.
type envService struct{ s *Server }

func (e envService) ListEnvs(ctx context.Context) ([]record.Environment, error) {
	return e.s.store.ListEnvs(ctx)
}

func (e envService) GetEnv(ctx context.Context, name string) (record.Environment, error) {
	return e.s.store.GetEnv(ctx, name)
}

func (e envService) CreateEnv(ctx context.Context, env record.Environment) error {
	return e.s.CreateEnv(ctx, env)
}

func (e envService) DeleteEnv(ctx context.Context, name string) error {
	return e.s.DeleteEnv(ctx, name)
}
