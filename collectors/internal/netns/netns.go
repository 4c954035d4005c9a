// Package netns forwards to github.com/ccab-dev/ccab/internal/netns, which the rollout
// agent shares; see there.
package netns

import shared "github.com/ccab-dev/ccab/internal/netns"

// Dir is where `ip netns add NAME` bind-mounts named namespaces.
const Dir = shared.Dir

// Path returns the file of the namespace called name (see shared.Path).
func Path(name string) string { return shared.Path(name) }

// Do runs fn with the calling OS thread in the network namespace at path (see shared.Do).
func Do(path string, fn func() error) error { return shared.Do(path, fn) }
