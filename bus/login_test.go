package bus

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBrokerLogin(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	user, password := LoginCredentials(key, "prod", "web-1.example.com", now)
	l, err := CheckLogin(user, password, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Env != "prod" || l.Agent != "web-1.example.com" || !l.Key.Equal(key.Public()) {
		t.Fatalf("got %+v, want prod/web-1.example.com with the key", l)
	}
	otherUser, otherPassword := LoginCredentials(other, "prod", "web-1.example.com", now)
	for _, c := range []struct{ name, user, password string }{
		{"another key's password", user, otherPassword},
		{"a password for another user", otherUser, password},
		{"another agent's name", strings.Replace(user, "web-1", "web-2", 1), password},
		{"time changed", user, strings.Replace(password, ".", ".1", 1)},
		{"not an agent", "guest", "guest"},
		{"no key", "agent:prod:web-1:", password},
		{"colon in the name", "agent:prod:web:1:" + strings.Split(user, ":")[3], password},
		{"bad environment", "agent:Prod:web-1:" + strings.Split(user, ":")[3], password},
		{"empty password", user, ""},
	} {
		if _, err := CheckLogin(c.user, c.password, now, time.Minute); !errors.Is(err, ErrBadLogin) {
			t.Errorf("%s: got %v, want ErrBadLogin", c.name, err)
		}
	}
	for _, skew := range []time.Duration{-2 * time.Minute, 2 * time.Minute} {
		if _, err := CheckLogin(user, password, now.Add(skew), time.Minute); !errors.Is(err, ErrBadLogin) || !strings.Contains(err.Error(), "clock") {
			t.Errorf("checked %v later: got %v, want a stale login naming the clock", skew, err)
		}
	}
}
