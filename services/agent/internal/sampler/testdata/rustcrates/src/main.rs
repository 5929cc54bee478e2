use std::hint::black_box;

// The crate's digest is the hot leaf: main <- middle <- digest <- md5.
#[inline(never)]
fn digest(buf: &[u8]) -> u8 {
    md5::compute(buf).0[0]
}

#[inline(never)]
fn middle(buf: &mut [u8]) -> u64 {
    let mut s = 0u64;
    for i in 0..16u8 {
        buf[0] = i;
        s = s.wrapping_add(digest(black_box(buf)) as u64);
    }
    s
}

fn main() {
    let mut buf = vec![7u8; 1 << 16];
    let mut s = 0u64;
    loop {
        s = s.wrapping_add(middle(&mut buf));
        if s == 42 {
            println!("{s}");
        }
    }
}
