// Package inetsum computes the Internet checksums (RFC 1071) the capture
// generators write into synthesized and rewritten packets.
package inetsum

// ipProtoTCP is IPv4's protocol number for TCP.
const ipProtoTCP = 6

// Checksum is the Internet checksum of b, starting from sum.
func Checksum(sum uint32, b []byte) uint16 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// TCP is the checksum of a TCP segment over IPv4: the pseudo-header built
// from the IPv4 header ip, and the segment tcp (checksum field zeroed).
func TCP(ip, tcp []byte) uint16 {
	var sum uint32
	for i := 12; i < 20; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	sum += ipProtoTCP + uint32(len(tcp))
	return Checksum(sum, tcp)
}
