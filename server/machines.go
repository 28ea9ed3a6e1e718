package server

import "github.com/tetherhq/tether/server/machines"

// Machines made from blueprints are package machines': the server hands
// the API and the console its room.

// Machines returns the room of machines made from blueprints.
func (s *Server) Machines() *machines.Room { return s.machines }
