//! The `sandfleet-jail` binary; see the library's documentation.

fn main() {
    sandfleet_jail::main()
}
