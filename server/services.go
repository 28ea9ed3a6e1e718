package server

import (
	"context"
	"net/http"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
)

// readiness is what a bus may say of its connection.
type readiness interface {
	Ready(ctx context.Context) error
}

// APIServices wires the API to the server: reads go to the store, changes
// with consequences through the server. metrics serves /metrics (nil: none).
func APIServices(s *Server, metrics http.Handler) api.Services {
	ready := map[string]func(context.Context) error{"store": s.store.Ping}
	if r, ok := s.bus.(readiness); ok {
		ready["broker"] = r.Ready
	}
	svc := api.Services{
		Envs:       envService{s},
		Settings:   s,
		Versions:   s.store,
		Exporter:   s,
		Resources:  s.store,
		Agents:     s.store,
		Control:    s,
		Operations: s,
		Records:    s.store,
		Tokens:     s.store,
		Enrollment: s.store,
		Events:     s,
		Ready:      ready,
		Metrics:    metrics,
		Observer:   s.metrics,
	}
	return svc
}

// envService reads environments from the store and changes them through
// the server.
type envService struct{ s *Server }

func (e envService) ListEnvs(ctx context.Context) ([]model.Environment, error) {
	return e.s.store.ListEnvs(ctx)
}

func (e envService) GetEnv(ctx context.Context, name string) (model.Environment, error) {
	return e.s.store.GetEnv(ctx, name)
}

func (e envService) CreateEnv(ctx context.Context, env model.Environment) error {
	return e.s.CreateEnv(ctx, env)
}

func (e envService) DeleteEnv(ctx context.Context, name string) error {
	if err := e.s.store.DeleteEnv(ctx, name); err != nil {
		return err
	}
	e.s.agents.forgetEnv(name)
	return nil
}
