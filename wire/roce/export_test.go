package roce

// CRCSlicing8 exposes the prefix CRC loop to tests.
var CRCSlicing8 = crcSlicing8

// IPv4IDDiff and IPv4IDFromDiff expose the ID-recovery algebra to tests.
var (
	IPv4IDDiff     = ipv4IDDiff
	IPv4IDFromDiff = ipv4IDFromDiff
	MulModP        = mulModP
	MulModPFast    = mulModPFast
)

// CRCXInv is x^-1 mod P.
const CRCXInv = crcXInv
