package redis

import goredis "github.com/redis/go-redis/v9"

// Driver is the driver type, for the tests that drive the SPI directly.
type Driver = driver

// NewDriver returns a driver over client, as New does under its backend,
// for the tests that drive the SPI directly.
func NewDriver(client goredis.UniversalClient, opts *Options) (*Driver, error) {
	return newDriver(client, opts, false)
}
