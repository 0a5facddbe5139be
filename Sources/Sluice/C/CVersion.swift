import CSluice

/// The C library's version (`sluice_version`), for tools of this package.
package let sluiceVersion = String(cString: sluice_version())
