//! The HTTP client policy every sandfleet driver uses: pooled clients per configuration, idle expiry below the server's keep-alive, retries by what is safe, a host-wide create pacer, typed errors.
