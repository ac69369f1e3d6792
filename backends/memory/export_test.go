package memory

// Driver is the driver type, for the tests that drive the SPI directly.
type Driver = driver

// NewDriver returns a driver on opts.Store (a fresh private store by
// default), for the tests that drive the SPI directly.
func NewDriver(opts *Options) *Driver {
	if opts == nil {
		return newDriver(nil)
	}
	return newDriver(opts.Store)
}
