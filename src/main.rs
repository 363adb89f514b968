fn main() {
    println!("rdma-probe-exporter");
}
