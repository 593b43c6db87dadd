set terminal pngcairo size 900,560 font ',11'
set output '/work/main/bench/scaling/results/2026-11-28-iters10/scaling.png'
set title 'all-reduce busbw on simulated hosts: every link 1gbit, 64M per rank'
set xlabel 'hosts (N)'
set ylabel 'busbw (GB/s)'
set xrange [1.5:16.5]
set xtics (2,4,8,12,16)
set yrange [0:0.143750]
set key center right
set grid
plot '/work/main/bench/scaling/results/2026-11-28-iters10/scaling.dat' u 1:4 w l lw 2 dt 2 lc rgb '#555555' t 'link rate', \
     '' u 1:5 w l lw 1 dt 3 lc rgb '#555555' t 'TCP ceiling (95.6% of link)', \
     '' u 1:6 w l lw 1 dt 4 lc rgb '#d62728' t 'star ideal: ceiling / N', \
     '' u 1:2 w lp lw 2 pt 7 lc rgb '#1f77b4' t 'ring (RR\_ALGO=ring)', \
     '' u 1:3 w lp lw 2 pt 5 lc rgb '#d62728' t 'star / parameter server (RR\_ALGO=star)'
