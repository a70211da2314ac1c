//! IP addresses of this machine's interfaces, from `getifaddrs(3)`.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Interface name -> its IPv4 and IPv6 addresses, in the order the kernel lists them.
/// Empty if `getifaddrs` fails (the addresses are informative; discovery goes on).
pub(crate) fn interface_addresses() -> BTreeMap<String, Vec<IpAddr>> {
    let mut by_name: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs only writes the list head into `head`; on success the list is
    // ours until the freeifaddrs call below, on failure nothing was allocated.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return by_name;
    }
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: `cursor` is a non-null node of the list getifaddrs returned, which
        // stays valid and unmodified until freeifaddrs.
        let entry = unsafe { &*cursor };
        cursor = entry.ifa_next;
        if entry.ifa_name.is_null() || entry.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a non-null, NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(entry.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points to a sockaddr owned by the list.
        let family = i32::from(unsafe { (*entry.ifa_addr).sa_family });
        let addr = match family {
            libc::AF_INET => {
                // SAFETY: for AF_INET the sockaddr is a sockaddr_in; read_unaligned does
                // not assume the allocation is aligned for it.
                let sin = unsafe { entry.ifa_addr.cast::<libc::sockaddr_in>().read_unaligned() };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: for AF_INET6 the sockaddr is a sockaddr_in6; read_unaligned as
                // above.
                let sin6 = unsafe { entry.ifa_addr.cast::<libc::sockaddr_in6>().read_unaligned() };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        by_name.entry(name).or_default().push(addr);
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed exactly once; no
    // reference into the list outlives this point (names and addresses were copied).
    unsafe { libc::freeifaddrs(head) };
    by_name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_address() {
        let all = interface_addresses();
        // Every Linux machine, container or VM has lo; network namespaces without it
        // configured have it down but still listed only if it has addresses.
        if let Some(lo) = all.get("lo") {
            assert!(lo.iter().any(|a| a.is_loopback()), "{lo:?}");
        }
    }
}
