import SluiceHTTP
import Testing

/// The middleware's framework-free conveniences: client-address keys
/// (IPv6 masked to a prefix) and costs by route.
@Suite("Middleware keys and route costs")
struct MiddlewareKeyTests {
    @Test("IPv6 addresses are keyed by their /64 (or the prefix given), IPv4 as they are")
    func addressKeys() {
        // Every address of one /64 is one key.
        #expect(ClientAddressKey.key("2001:db8:1:2:a:b:c:d") == "2001:db8:1:2::/64")
        #expect(ClientAddressKey.key("2001:0DB8:0001:0002::1") == "2001:db8:1:2::/64")
        #expect(ClientAddressKey.key("2001:db8:1:3::1") == "2001:db8:1:3::/64")
        // Other prefix lengths, on and off a group's boundary.
        #expect(ClientAddressKey.key("2001:db8:1:2::1", ipv6PrefixLength: 48) == "2001:db8:1::/48")
        #expect(ClientAddressKey.key("2001:db8:abcd:ffff::1", ipv6PrefixLength: 56) == "2001:db8:abcd:ff00::/56")
        #expect(ClientAddressKey.key("2001:db8::1", ipv6PrefixLength: 0) == "::/0")
        #expect(ClientAddressKey.key("2001:db8::1", ipv6PrefixLength: 128) == "2001:db8::1")
        #expect(ClientAddressKey.key("2001:db8::1", ipv6PrefixLength: 200) == "2001:db8::1")
        #expect(ClientAddressKey.key("2001:db8:0:0:1:0:0:1", ipv6PrefixLength: 128) == "2001:db8::1:0:0:1")
        #expect(ClientAddressKey.key("::1") == "::/64")
        #expect(ClientAddressKey.key("::1", ipv6PrefixLength: 128) == "::1")
        #expect(ClientAddressKey.key("fe80::1%eth0") == "fe80::/64")
        // IPv4, and IPv4 seen through a dual-stack socket.
        #expect(ClientAddressKey.key("192.0.2.7") == "192.0.2.7")
        #expect(ClientAddressKey.key("::ffff:192.0.2.7") == "192.0.2.7")
        #expect(ClientAddressKey.key("::FFFF:c000:0207") == "192.0.2.7")
        #expect(ClientAddressKey.key("64:ff9b::192.0.2.7", ipv6PrefixLength: 96) == "64:ff9b::/96")
        // Not an address: as it is.
        for text in ["", "alice", "1:2:3", "1::2::3", ":::", "12345::", "1:2:3:4:5:6:7:8:9", "::g", "1.2.3.4::"] {
            #expect(ClientAddressKey.key(text) == text, "\(text)")
        }
        #expect(ClientAddressKey.defaultIPv6PrefixLength == 64)
    }

    @Test("route costs: the longest prefix by whole segments, the default elsewhere")
    func routeCosts() {
        let costs = RouteCosts(["/search": 5, "/search/suggest/": 1, "/export": 50], default: 2)
        #expect(costs.cost(path: "/search") == 5)
        #expect(costs.cost(path: "/search/") == 5)
        #expect(costs.cost(path: "/search/images") == 5)
        #expect(costs.cost(path: "/search/suggest") == 1)
        #expect(costs.cost(path: "/search/suggest/x?q=1") == 1)
        #expect(costs.cost(path: "/search?q=swift") == 5)
        #expect(costs.cost(path: "/searches") == 2)
        #expect(costs.cost(path: "/export/all") == 50)
        #expect(costs.cost(path: "/") == 2)
        #expect(costs.cost(path: "") == 2)
        #expect(RouteCosts([:]).cost(path: "/x") == 1)
        // "/" is the prefix of every path.
        #expect(RouteCosts(["/": 3, "/free": 0]).cost(path: "/a/b") == 3)
        #expect(RouteCosts(["/": 3, "/free": 0]).cost(path: "/free/b") == 0)
    }
}
