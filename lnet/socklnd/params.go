package socklnd

import (
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Module-parameter names (ksocklnd/lnet), as accepted by Config.SetParam.
// Times are in the kernel's units: seconds, or milliseconds for the
// *_reconnectms pair.
var paramNames = map[string]func(c *Config, v string) error{
	"accept_port":     intParam(func(c *Config, n int) { c.AcceptPort = n }),
	"accept":          func(c *Config, v string) (err error) { c.Accept, err = ParseAcceptMode(v); return },
	"sock_timeout":    secParam(func(c *Config, d time.Duration) { c.SockTimeout = d }),
	"keepalive":       secParam(func(c *Config, d time.Duration) { c.Keepalive = d }),
	"keepalive_idle":  secParam(func(c *Config, d time.Duration) { c.KeepaliveIdle = d }),
	"keepalive_count": intParam(func(c *Config, n int) { c.KeepaliveCount = n }),
	"keepalive_intvl": secParam(func(c *Config, d time.Duration) { c.KeepaliveIntvl = d }),
	"nconnds":         intParam(func(c *Config, n int) { c.Nconnds = n }),
	"nagle":           boolParam(func(c *Config, b bool) { c.Nagle = b }),
	"tx_buffer_size":  intParam(func(c *Config, n int) { c.TxBufferSize = n }),
	"rx_buffer_size":  intParam(func(c *Config, n int) { c.RxBufferSize = n }),
	"min_bulk":        intParam(func(c *Config, n int) { c.MinBulk = n }),
	"zc_min_payload":  intParam(func(c *Config, n int) { c.ZCMinPayload = n }),
	"min_reconnectms": msParam(func(c *Config, d time.Duration) { c.MinReconnect = d }),
	"max_reconnectms": msParam(func(c *Config, d time.Duration) { c.MaxReconnect = d }),
	"typed_conns":     boolParam(func(c *Config, b bool) { c.SingleConn = !b }),
	"conns_per_peer":  intParam(func(c *Config, n int) { c.ConnsPerPeer = n }),
	"enable_csum":     boolParam(func(c *Config, b bool) { c.EnableCsum = b }),
}

// ParamNames lists the module-parameter names SetParam accepts.
func ParamNames() []string {
	names := make([]string, 0, len(paramNames))
	for n := range paramNames {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// SetParam sets one tunable by its ksocklnd module-parameter name
// ("sock_timeout", "typed_conns", ...; see ParamNames), with the value
// written as for modprobe. Durations are seconds, except min_reconnectms
// and max_reconnectms (milliseconds); 0 or less disables a duration.
// Version, DisableZCRequest and the address settings have no module
// parameter and are set on the Config directly.
func (c *Config) SetParam(name, value string) error {
	set, ok := paramNames[name]
	if !ok {
		return fmt.Errorf("socklnd: unknown parameter %q", name)
	}
	if err := set(c, value); err != nil {
		return fmt.Errorf("socklnd: %s=%q: %w", name, value, err)
	}
	return nil
}

func intParam(set func(*Config, int)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		set(c, n)
		return nil
	}
}

func boolParam(set func(*Config, bool)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			b, berr := strconv.ParseBool(v)
			if berr != nil {
				return err
			}
			set(c, b)
			return nil
		}
		set(c, n != 0)
		return nil
	}
}

// secParam keeps the kernel's "≤ 0 disables" meaning as a negative
// duration (zero would mean "default" in Config).
func secParam(set func(*Config, time.Duration)) func(*Config, string) error {
	return unitParam(time.Second, set)
}

func msParam(set func(*Config, time.Duration)) func(*Config, string) error {
	return unitParam(time.Millisecond, set)
}

func unitParam(unit time.Duration, set func(*Config, time.Duration)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		if n <= 0 {
			set(c, -1)
			return nil
		}
		set(c, time.Duration(n)*unit)
		return nil
	}
}
