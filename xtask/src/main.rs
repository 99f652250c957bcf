//! Project automation.
#![forbid(unsafe_code)]

fn main() {
    println!("xtask");
}
