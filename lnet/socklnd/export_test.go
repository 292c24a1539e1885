package socklnd

// Test-only exports for the external end-to-end tests.
var (
	TestIPs    = testIPs
	BaseConfig = baseConfig
	TestLog    = testLog
	TestPort   = testPort
	Pattern    = pattern
)
