// Package client is the Go client library for Meridian: producers,
// consumers and the admin client, with lookup, reconnect and back-pressure.
package client
