//go:build !linux

package handler

import "os"

// deviceOf reports that grouping is not available: callers fsync each file.
func deviceOf(*os.File) (uint64, bool, error) { return 0, false, nil }

func syncFS(f *os.File) error { return f.Sync() }
