package roce

// CRCSlicing8 exposes the prefix CRC loop to tests.
var CRCSlicing8 = crcSlicing8
