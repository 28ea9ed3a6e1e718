package handler

import (
	"os"

	"golang.org/x/sys/unix"
)

// deviceOf returns the file system device of f.
func deviceOf(f *os.File) (uint64, bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, false, err
	}
	return st.Dev, true, nil
}

// syncFS flushes the whole file system holding f (syncfs(2)); since Linux 5.8
// it reports write-back errors of that file system.
func syncFS(f *os.File) error {
	return unix.Syncfs(int(f.Fd()))
}
