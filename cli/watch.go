package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server"
)

func watchCommand(term *terminal) *ucli.Command {
	return remoteCommand(term, "watch", "follow live events: results, deploys, agents, alerts (Ctrl-C stops)", "", nil,
		func(c *ucli.Context, cl *client, asJSON bool) error {
			q := ""
			if cl.env != "" {
				q = "?env=" + url.QueryEscape(cl.env)
			}
			req, err := http.NewRequestWithContext(c.Context, "GET", cl.base+"/api/v1/events"+q, nil)
			if err != nil {
				return usageError("server URL %q: %v", cl.base, err)
			}
			req.Header.Set("Authorization", "Bearer "+cl.token)
			resp, err := (&http.Client{}).Do(req)
			if err != nil {
				if c.Context.Err() != nil {
					return nil
				}
				return fmt.Errorf("cannot reach the server at %s: %v", cl.base, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("server answered %s: check the token and --env", resp.Status)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			var kind string
			for sc.Scan() {
				line := sc.Text()
				if v, ok := strings.CutPrefix(line, "event: "); ok {
					kind = v
					continue
				}
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				if asJSON {
					fmt.Fprintln(term.stdout, data)
					continue
				}
				var e server.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					// A newer server's event: show it as it came.
					fmt.Fprintf(term.stdout, "%s  %s  %s\n", time.Now().Format("15:04:05.000"), kind, data)
					continue
				}
				fmt.Fprintln(term.stdout, eventLine(term, e))
			}
			if c.Context.Err() != nil {
				return nil
			}
			return sc.Err()
		})
}
