package devinfo

// CollectAs is CollectAt as if this process were self (a test's stat
// socket is its own process's, which CollectAt leaves out).
var CollectAs = collect
