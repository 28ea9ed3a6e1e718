package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The limits on inotify of the machine, per user: an agent watches its
// files with an inotify instance of its own, as on a host. Variables for
// the tests.
var (
	inotifyInstances = "/proc/sys/fs/inotify/max_user_instances"
	inotifyWatches   = "/proc/sys/fs/inotify/max_user_watches"
)

// raiseInotifyLimits makes room for agents inotify instances (and a few
// watches each) in this machine's limits, which are per user and 128
// instances by default: past the limit an agent cannot watch and polls
// every resource every few seconds instead, which for thousands of agents
// in one process costs more CPU than everything else they do. As root it
// raises the limits and restore puts them back; else, or where they
// cannot be read, it says why in warning and the run goes on (the agents
// past the limit poll). instances is the limit the run has.
func raiseInotifyLimits(agents int) (instances int, warning string, restore func()) {
	need := agents + inotifyMargin
	var undo []func()
	raise := func(path string, need int) (int, error) {
		cur, err := readLimit(path)
		if err != nil || cur >= need {
			return cur, err
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(need)), 0o644); err != nil {
			return cur, err
		}
		undo = append(undo, func() { _ = os.WriteFile(path, []byte(strconv.Itoa(cur)), 0o644) })
		return need, nil
	}
	instances, err := raise(inotifyInstances, need)
	if err == nil {
		_, err = raise(inotifyWatches, agents*8+8192)
	}
	restore = func() {
		for _, u := range undo {
			u()
		}
	}
	if err != nil || instances < need {
		warning = fmt.Sprintf("inotify: %d agents need as many inotify instances, and this machine allows %d per user (%v): "+
			"the agents past it poll their files every 5 s instead of watching them, which costs this process much CPU; "+
			"as root, `sysctl -w fs.inotify.max_user_instances=%d`", agents, instances, err, need)
	}
	return instances, warning, restore
}

// inotifyMargin is room for the inotify instances of other processes of
// the user.
const inotifyMargin = 64

func readLimit(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
