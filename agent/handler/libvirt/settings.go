package libvirt

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
)

// Settings' defaults, the same as the server's for a libvirt platform.
const (
	DefaultNetwork    = "user"
	DefaultPool       = "default"
	DefaultDomainType = "qemu"
	DefaultMemoryMiB  = 1024
	DefaultCPUs       = 1
	DefaultDiskGiB    = 8
	// DefaultLogDir is where the machines' serial consoles are written,
	// next to libvirt's own logs of its QEMU guests.
	DefaultLogDir = "/var/log/libvirt/qemu"
)

// settings are a machine's settings, read from MachineSpec.Settings (the
// package's documentation lists them).
type settings struct {
	uri        string
	network    string
	pool       string
	domainType string
	memoryMiB  int64
	cpus       int64
	diskGiB    int64
	tftpRoot   string
	logDir     string
}

func readSettings(m map[string]any) (settings, error) {
	s := settings{
		network:    DefaultNetwork,
		pool:       DefaultPool,
		domainType: DefaultDomainType,
		memoryMiB:  DefaultMemoryMiB,
		cpus:       DefaultCPUs,
		diskGiB:    DefaultDiskGiB,
		logDir:     DefaultLogDir,
	}
	for _, f := range []struct {
		name string
		to   *string
	}{
		{"uri", &s.uri}, {"network", &s.network}, {"pool", &s.pool}, {"domain_type", &s.domainType},
		{"tftp_root", &s.tftpRoot}, {"log_dir", &s.logDir},
	} {
		if err := stringSetting(m, f.name, f.to); err != nil {
			return s, err
		}
	}
	for _, f := range []struct {
		name     string
		to       *int64
		min, max int64
	}{
		{"memory_mib", &s.memoryMiB, 64, 1 << 20},
		{"cpus", &s.cpus, 1, 256},
		{"disk_gib", &s.diskGiB, 1, 1 << 16},
	} {
		if err := intSetting(m, f.name, f.to, f.min, f.max); err != nil {
			return s, err
		}
	}
	switch s.domainType {
	case "qemu", "kvm":
	default:
		return s, fmt.Errorf("setting domain_type: %q: want qemu or kvm", s.domainType)
	}
	for _, d := range []struct{ name, dir string }{{"tftp_root", s.tftpRoot}, {"log_dir", s.logDir}} {
		if d.dir != "" && !filepath.IsAbs(d.dir) {
			return s, fmt.Errorf("setting %s: %q: want an absolute path", d.name, d.dir)
		}
	}
	// QEMU reads -netdev's options separated by commas.
	if strings.Contains(s.tftpRoot, ",") {
		return s, fmt.Errorf("setting tftp_root: %q: QEMU cannot take a path with a comma", s.tftpRoot)
	}
	return s, nil
}

func stringSetting(m map[string]any, name string, to *string) error {
	v, ok := m[name]
	if !ok || v == nil {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("setting %s: %v (%T): want a string", name, v, v)
	}
	if s != "" {
		*to = s
	}
	return nil
}

// intSetting reads a whole number: JSON gives a float64 (or a
// json.Number), Go callers an int or an int64.
func intSetting(m map[string]any, name string, to *int64, min, max int64) error {
	v, ok := m[name]
	if !ok || v == nil {
		return nil
	}
	var n int64
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int32:
		n = int64(v)
	case int64:
		n = v
	case float64:
		if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return fmt.Errorf("setting %s: %v: want a whole number", name, v)
		}
		n = int64(v)
	case json.Number:
		i, err := v.Int64()
		if err != nil {
			return fmt.Errorf("setting %s: %v: want a whole number", name, v)
		}
		n = i
	default:
		return fmt.Errorf("setting %s: %v (%T): want a whole number", name, v, v)
	}
	if n < min || n > max {
		return fmt.Errorf("setting %s: %d: want %d to %d", name, n, min, max)
	}
	*to = n
	return nil
}
