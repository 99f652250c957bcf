//! The `xpu` command.
#![forbid(unsafe_code)]

fn main() {
    println!("xpu");
}
