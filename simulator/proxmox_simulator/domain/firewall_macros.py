"""pve-firewall's standard macros: named bundles of a service's well-known
protocol/port matches that a rule can use instead of its own ``proto``/``dport``
(Shorewall's macro set, which PVE imported; a few are IPv6-only).  Names are PVE's;
the descriptions are the simulator's own."""

from __future__ import annotations

from proxmox_simulator.domain.errors import ParameterError

MACROS: dict[str, str] = {
    "Amanda": "Amanda backup service",
    "Auth": "Ident (auth) service",
    "BGP": "BGP routing sessions",
    "BitTorrent": "BitTorrent, clients up to 3.1",
    "BitTorrent32": "BitTorrent, clients 3.2 and newer",
    "CVS": "CVS pserver",
    "Ceph": "Ceph monitors, OSDs and metadata servers",
    "Citrix": "Citrix ICA, ICA browser and CGP",
    "DAAP": "DAAP music sharing (iTunes and similar)",
    "DCC": "DCC spam checksum clearinghouse",
    "DHCPfwd": "DHCP relayed between networks",
    "DHCPv6": "DHCP for IPv6",
    "DNS": "Name service over UDP and TCP",
    "Distcc": "distcc compile farm",
    "FTP": "FTP control connection",
    "Finger": "Finger user information",
    "GNUnet": "GNUnet peer-to-peer network",
    "GRE": "GRE tunnels (IP protocol 47)",
    "Git": "Git protocol daemon",
    "HKP": "OpenPGP key servers (HKP)",
    "HTTP": "Web over plain HTTP",
    "HTTPS": "Web over TLS",
    "ICPV2": "Squid cache peering (ICP v2)",
    "ICQ": "ICQ/AIM messaging",
    "IMAP": "IMAP mail access",
    "IMAPS": "IMAP mail access over TLS",
    "IPIP": "IP-in-IP tunnels (IP protocol 94)",
    "IPsec": "IPsec key exchange and ESP",
    "IPsecah": "IPsec key exchange and AH",
    "IPsecnat": "IPsec with NAT traversal",
    "IRC": "IRC chat",
    "Jetdirect": "Raw printing to HP Jetdirect",
    "L2TP": "L2TP tunnels",
    "LDAP": "LDAP directory",
    "LDAPS": "LDAP directory over TLS",
    "MDNS": "Multicast DNS (zeroconf)",
    "MSNP": "MSN messenger notification protocol",
    "MSSQL": "Microsoft SQL Server",
    "Mail": "Mail delivery and submission (25, 465, 587)",
    "Munin": "Munin monitoring node",
    "MySQL": "MySQL database",
    "NNTP": "Usenet news",
    "NNTPS": "Usenet news over TLS",
    "NTP": "Time synchronisation (NTP)",
    "NeighborDiscovery": "IPv6 router and neighbor discovery",
    "OSPF": "OSPF routing (IP protocol 89)",
    "OpenVPN": "OpenVPN tunnels",
    "PCA": "pcAnywhere remote control",
    "PMG": "Proxmox Mail Gateway web interface",
    "POP3": "POP3 mail access",
    "POP3S": "POP3 mail access over TLS",
    "PPtP": "PPTP tunnels",
    "Ping": "Echo requests (ping)",
    "PostgreSQL": "PostgreSQL database",
    "Printer": "LPD printing",
    "RDP": "Remote Desktop Protocol",
    "RIP": "RIP routing",
    "RNDC": "BIND remote control",
    "Razor": "Vipul's Razor spam detection",
    "Rdate": "rdate time retrieval",
    "Rsync": "rsync daemon",
    "SANE": "SANE network scanners",
    "SMB": "Windows file sharing (SMB/CIFS)",
    "SMBswat": "Samba web administration (SWAT)",
    "SMTP": "Mail transfer (SMTP)",
    "SMTPS": "Mail transfer over TLS",
    "SNMP": "SNMP management",
    "SPAMD": "SpamAssassin daemon",
    "SPICEproxy": "Proxmox VE SPICE proxy",
    "SSH": "Secure shell",
    "SVN": "Subversion daemon",
    "SixXS": "SixXS IPv6 tunnel broker",
    "Squid": "Squid proxy",
    "Submission": "Mail submission (587)",
    "Syslog": "Remote syslog over UDP and TCP",
    "TFTP": "Trivial FTP",
    "Telnet": "Telnet",
    "Telnets": "Telnet over TLS",
    "Time": "Time protocol (RFC 868)",
    "Trcrt": "Traceroute, up to 30 hops",
    "VNC": "VNC displays 0 to 99",
    "VNCL": "VNC servers reaching viewers in listen mode",
    "Web": "Web over HTTP and HTTPS",
    "Webcache": "Web proxy on port 8080",
    "Webmin": "Webmin administration",
    "Whois": "Whois lookups",
}
_BY_LOWER = {name.lower(): name for name in MACROS}


def listing() -> list[dict]:
    """``GET /cluster/firewall/macros``: every macro with its description."""
    return [{"macro": name, "descr": MACROS[name]} for name in sorted(MACROS, key=str.lower)]


def canonical(macro: str) -> str:
    """A rule's macro by its preferred spelling (PVE matches names case-insensitively)."""
    name = _BY_LOWER.get(str(macro).lower())
    if name is None:
        raise ParameterError({"macro": f"unknown macro '{macro}'"})
    return name
